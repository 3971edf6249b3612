package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runBenchCmd runs `custody bench args...` and returns its stdout, its
// stderr and its error.
func runBenchCmd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := newBenchCmd()
	cmd.SilenceErrors, cmd.SilenceUsage = true, true // as under rootCmd
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(t.Context())
	return out.String(), errOut.String(), err
}

// The flags of `custody bench` from before its subcommands still work for
// one release: each old form runs its subcommand, with the flags it was
// given (here refused by that subcommand's checks before anything starts),
// after one line on stderr naming the subcommand; flags the subcommand
// has not are ignored, as they were.
func TestBenchOldFlagsAreAliases(t *testing.T) {
	for _, c := range []struct {
		args      []string
		sub, want string
	}{
		{[]string{"--e2e", "--pulls", "0"}, "e2e", "--pulls 0 must be at least 1"},
		{[]string{"--e2e", "--sizes", "1", "--param", "bad"}, "e2e", `--param "bad": want key=value`},
		{[]string{"--e2e", "--ranks", "2", "--concurrency", "0"}, "ranks", "--concurrency 0 must be in [1, 4096]"},
		{[]string{"--e2e", "--ranks=2", "--transport", "tcp", "--pulls", "0"}, "ranks", `--transport "tcp": want fake or ucx`},
		{[]string{"--sdk", "--min-time", "0"}, "sdk", "--min-time 0s must be positive"},
		{[]string{"--sdk", "--repeat", "2", "--repeat", "0"}, "sdk", "--repeat 0 must be at least 1"},
		{[]string{"--plugin", "/nonexistent/custody-transport-x", "--sizes", "4096", "--sizes", "0"}, "bw", "--sizes: 0 must be in (0, 67108864]"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			out, stderr, err := runBenchCmd(t, c.args...)
			require.Error(t, err)
			assert.Equal(t, c.want, err.Error())
			assert.Empty(t, out)
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			require.Len(t, lines, 1, "one line: %q", stderr)
			assert.Contains(t, lines[0], "is deprecated")
			assert.True(t, strings.HasSuffix(lines[0], "use custody bench "+c.sub), "%q", lines[0])
		})
	}
}

// An old flag's value reaches the subcommand as given, an empty one too
// (--perftest "" skips ucx_perftest).
func TestBenchOldFlagsPassTheirValues(t *testing.T) {
	cmd := newBenchCmd()
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"--plugin", "/nonexistent/x", "--perftest", "", "--param", "a=1", "--param", "b=2", "--min-time", "0"})
	require.EqualError(t, cmd.ExecuteContext(t.Context()), "--min-time 0s must be positive")
	bw, _, err := cmd.Find([]string{"bw"})
	require.NoError(t, err)
	perftest := bw.Flags().Lookup("perftest")
	assert.True(t, perftest.Changed)
	assert.Empty(t, perftest.Value.String())
	params, err := bw.Flags().GetStringArray("param")
	require.NoError(t, err)
	assert.Equal(t, []string{"a=1", "b=2"}, params)
	assert.Equal(t, "/nonexistent/x", bw.Flags().Lookup("plugin").Value.String())
}

// Old flags that name no measurement, or two, are refused as they were.
func TestBenchOldFlagsRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--ranks", "2"}, "--ranks 2: only --e2e measures ranks"},
		{[]string{"--e2e", "--sdk"}, "--e2e and --sdk measure different things; pass one of them"},
		{[]string{"--e2e", "--ranks", "3"}, "--ranks 3: want 1 or 2"},
	} {
		_, _, err := runBenchCmd(t, c.args...)
		assert.EqualError(t, err, c.want, "%v", c.args)
	}
}

// The subcommands themselves print no deprecation note.
func TestBenchSubcommandsAreQuiet(t *testing.T) {
	for _, args := range [][]string{
		{"e2e", "--pulls", "0"},
		{"ranks", "--duration", "0s"},
		{"sdk", "--repeat", "0"},
		{"bw", "--min-time", "0s"},
		{"nixl", "--sizes", "0"},
	} {
		_, stderr, err := runBenchCmd(t, args...)
		assert.Error(t, err, "%v", args)
		assert.Empty(t, stderr, "%v", args)
	}
}
