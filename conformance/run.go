package conformance

import (
	"testing"

	"github.com/custody-dev/custody/sdk"
)

// Run runs every selected check as a subtest of t (t.Run(group/name)), each
// with fresh agents from cfg.New, fresh regions, and a tracker that frees
// everything the check created. What the transport does not claim is
// skipped with the reason; a Config error fails t.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	desc, err := describe(t.Context(), cfg)
	if err != nil {
		t.Fatalf("describe the transport under test: %v", err)
	}
	for _, c := range allChecks() {
		if cfg.Match != nil && !cfg.Match(c.name) {
			continue
		}
		t.Run(c.name, func(t *testing.T) { runCheck(t, c, cfg, desc) })
	}
}

// runCheck runs one check under any runner: skip when the transport does
// not claim what it needs, else build its env and run it.
func runCheck(t T, c check, cfg Config, desc sdk.Description) {
	if reason := c.needs(desc); reason != "" {
		t.Skipf("%s", reason)
	}
	c.run(newEnv(t, cfg, desc))
}
