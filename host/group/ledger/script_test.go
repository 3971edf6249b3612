package ledger

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of the testdata scripts")

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

type scriptCase struct {
	line     int
	cmd      string
	expected string
}

// parseScript reads cases: a command line, "----", the expected output up
// to a blank line. Lines starting with # between cases are comments.
func parseScript(t *testing.T, path string) []scriptCase {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []scriptCase
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		c := scriptCase{line: n, cmd: line}
		require.True(t, sc.Scan(), "%s:%d: command without ----", path, n)
		n++
		require.Equal(t, "----", sc.Text(), "%s:%d: want ---- after the command", path, n)
		var exp []string
		for sc.Scan() {
			n++
			if sc.Text() == "" {
				break
			}
			exp = append(exp, sc.Text())
		}
		c.expected = strings.Join(exp, "\n")
		out = append(out, c)
	}
	require.NoError(t, sc.Err())
	return out
}

func runScript(t *testing.T, path string) {
	cases := parseScript(t, path)
	if len(cases) > 0 && strings.HasPrefix(cases[0].cmd, "new") && parseArgs(t, cases[0]).bool("explore") {
		runExploreScript(t, path, cases)
		return
	}
	var g *rig
	var b strings.Builder
	for _, c := range cases {
		if strings.HasPrefix(c.cmd, "new") {
			g = newRig(t, c)
		}
		require.NotNil(t, g, "%s:%d: start with new", path, c.line)
		got := g.run(c)
		if *rewrite {
			fmt.Fprintf(&b, "%s\n----\n%s\n\n", c.cmd, got)
			continue
		}
		require.Equal(t, c.expected, got, "%s:%d: %s", path, c.line, c.cmd)
	}
	if *rewrite {
		rewriteScript(t, path, cases, b.String())
	}
}

// rewriteScript replaces each case's expected text with the new output,
// keeping the file's comments.
func rewriteScript(t *testing.T, path string, cases []scriptCase, outs string) {
	blocks := strings.Split(strings.TrimSuffix(outs, "\n\n"), "\n\n")
	require.Len(t, blocks, len(cases))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(string(data), "\n")
	var out []string
	k := 0
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if k < len(cases) && i+1 == cases[k].line {
			out = append(out, blocks[k])
			i++ // ----
			for i+1 < len(lines) && lines[i+1] != "" {
				i++
			}
			k++
			continue
		}
		out = append(out, l)
	}
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(out, "\n")), 0o644))
}
