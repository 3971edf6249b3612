package ledger

import (
	"fmt"
	"strings"
	"testing"

	"github.com/custody-dev/custody/internal/scripttest"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/core"
)

// runExploreScript runs a script whose first command is "new size=N
// explore=true requests=a,b": the explorer's world, whose counterexamples
// are such scripts. Every invariant the explorer checks is checked after
// every command as well, so a counterexample copied in fails until the
// rule holds again.
func runExploreScript(t *testing.T, path string, cases []scripttest.Case) {
	require.Empty(t, playExploreScript(t, path, cases))
}

// playExploreScript plays an explorer's script, checking (or, with
// -rewrite, rewriting) each command's output, and returns the first
// invariant broken ("" if none).
func playExploreScript(t *testing.T, path string, cases []scripttest.Case) string {
	a := parseArgs(t, cases[0])
	cfg := exploreConfig{size: a.int("size", 2)}
	for _, id := range strings.Split(a.str("requests"), ",") {
		cfg.requests = append(cfg.requests, core.RequestID(id))
	}
	w := newWorld(t, cfg)
	var b strings.Builder
	broken := ""
	for i, c := range cases {
		got := w.render()
		if i > 0 {
			got = w.step(c.Cmd)
		}
		if w.violation != "" && broken == "" {
			broken = fmt.Sprintf("%s:%d: %s: invariant broken: %s", path, c.Line, c.Cmd, w.violation)
		}
		if *scripttest.Rewrite {
			fmt.Fprintf(&b, "%s\n----\n%s\n\n", c.Cmd, got)
			continue
		}
		require.Equal(t, c.Expected, got, "%s:%d: %s", path, c.Line, c.Cmd)
	}
	if *scripttest.Rewrite {
		scripttest.RewriteFile(t, path, cases, b.String())
	}
	return broken
}
