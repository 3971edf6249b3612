package core

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/scripttest"

	"github.com/stretchr/testify/require"
)

// runAsyncScript runs a script whose first command is "new async=true
// ...": its Work stays outstanding until a run or drain command delivers
// it, as in the explorer, whose counterexamples are such scripts. Every
// invariant the explorer checks is checked after every command as well,
// so a counterexample copied in fails until the rule holds again.
func runAsyncScript(t *testing.T, path string, cases []scripttest.Case) {
	cfg := asyncConfig(t, cases[0])
	w, err := newWorld(cfg, false)
	require.NoError(t, err)
	var b strings.Builder
	for i, c := range cases {
		got := w.render(len(w.log), nil)
		if i > 0 {
			got, err = w.step(c.Cmd)
			require.NoError(t, err, "%s:%d: %s", path, c.Line, c.Cmd)
		}
		require.Empty(t, w.violation, "%s:%d: %s: invariant broken", path, c.Line, c.Cmd)
		if *scripttest.Rewrite {
			fmt.Fprintf(&b, "%s\n----\n%s\n\n", c.Cmd, got)
			continue
		}
		require.Equal(t, c.Expected, got, "%s:%d: %s", path, c.Line, c.Cmd)
	}
	if *scripttest.Rewrite {
		scripttest.RewriteFile(t, path, cases, b.String())
	}
}

// asyncConfig reads "new async=true ranks=N pools=N cap=D lease=D
// policy=fence|quarantine|reuse events=BOOL scope=incoming|initiated".
func asyncConfig(t *testing.T, c scripttest.Case) exploreConfig {
	_, a := args(t, c)
	cfg := exploreConfig{ranks: atoi(t, a["ranks"], 1), pools: atoi(t, a["pools"], 1), holdCap: dur(t, a["cap"], 0), lease: dur(t, a["lease"], 5*time.Second),
		events: a["events"] == "true", initiatedOnly: a["scope"] == "initiated"}
	switch a["policy"] {
	case "quarantine":
		cfg.policy = EscalateQuarantine
	case "reuse":
		cfg.policy = EscalateReleaseAndReuse
	}
	return cfg
}
