package ledger

import (
	"fmt"
	"path/filepath"
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

// TestPendingScripts plays the scripts of the defects found and not fixed
// yet (testdata/pending): each must still break an invariant, and its
// output match. Once one no longer breaks one, its defect is fixed: move
// it to testdata, where it must hold every invariant.
func TestPendingScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/pending/*.txt")
	require.NoError(t, err)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			broken := playExploreScript(t, f, scripttest.Parse(t, f))
			require.NotEmpty(t, broken, "%s breaks no invariant: its defect is fixed; move it to testdata", f)
			t.Log(broken)
		})
	}
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
