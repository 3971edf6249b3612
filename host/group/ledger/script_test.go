package ledger

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/internal/scripttest"

	"github.com/stretchr/testify/require"
)

// TestScripts runs the data-driven scripts in testdata, one per rule or
// case, in the manner of raft's and core's: each command drives the
// ledgers of a group's ranks over an in-memory etcd (store_test.go), and
// its output (the transactions a rank planned and their answers, what
// each watch delivered, the outcomes, each request's phase) must match the
// text under the command. Run with -rewrite to regenerate the expected
// text, then read the diff.
func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runScript(t, f) })
	}
}

func runScript(t *testing.T, path string) {
	cases := scripttest.Parse(t, path)
	if len(cases) > 0 && strings.HasPrefix(cases[0].Cmd, "new") && parseArgs(t, cases[0]).bool("explore") {
		runExploreScript(t, path, cases)
		return
	}
	var g *rig
	var b strings.Builder
	for _, c := range cases {
		if strings.HasPrefix(c.Cmd, "new") {
			g = newRig(t, c)
		}
		require.NotNil(t, g, "%s:%d: start with new", path, c.Line)
		got := g.run(c)
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
