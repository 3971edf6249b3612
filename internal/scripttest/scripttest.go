// Package scripttest reads and rewrites the data-driven test scripts of
// core/testdata and host/group/ledger/testdata, in the manner of raft's:
// a command line, "----", the expected output up to a blank line; lines
// starting with # between cases are comments. Each package's runner
// executes the commands; this package keeps the format.
package scripttest

import (
	"bufio"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Rewrite, set by go test's -rewrite, makes a runner write each case's
// output in place of its expected text (then read the diff).
var Rewrite = flag.Bool("rewrite", false, "rewrite the expected output of the testdata scripts")

// Case is one command of a script, at line Line of its file.
type Case struct {
	Line     int
	Cmd      string
	Expected string
}

// Parse reads the cases of the script at path.
func Parse(t testing.TB, path string) []Case {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []Case
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		c := Case{Line: n, Cmd: line}
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
		c.Expected = strings.Join(exp, "\n")
		out = append(out, c)
	}
	require.NoError(t, sc.Err())
	return out
}

// RewriteFile replaces each case's expected text in the script at path
// with its output in outs (each "cmd\n----\noutput\n\n", in order),
// keeping the file's comments.
func RewriteFile(t testing.TB, path string, cases []Case, outs string) {
	blocks := strings.Split(strings.TrimSuffix(outs, "\n\n"), "\n\n")
	require.Len(t, blocks, len(cases))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(string(data), "\n")
	var out []string
	k := 0
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if k < len(cases) && i+1 == cases[k].Line {
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
