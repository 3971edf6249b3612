package main

import (
	"bytes"
	"encoding/xml"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/internal/testbin"
)

// buildFake builds the fake transport binary into a temporary directory
// (or finds it in $CUSTODY_BIN).
func buildFake(t *testing.T) string {
	t.Helper()
	dir, err := testbin.Build(t.TempDir(), "custody-transport-fake")
	require.NoError(t, err)
	return filepath.Join(dir, "custody-transport-fake")
}

// runConformance runs `custody conformance args...` and returns its
// output and error.
func runConformance(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newConformanceCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(t.Context())
	return out.String(), err
}

// TestConformanceCommand: the command passes the fake, fails naming the
// check when the fake misbehaves, and writes JUnit and JSON files.
func TestConformanceCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("launches plugin processes")
	}
	plugin := buildFake(t)
	dir := t.TempDir()
	junit, js := filepath.Join(dir, "c.xml"), filepath.Join(dir, "c.json")
	const only = "^contract/(describe|release-running-busy)$"

	out, err := runConformance(t, "--plugin", plugin, "--run", only, "--junit", junit, "--json", js)
	require.NoError(t, err, out)
	assert.Contains(t, out, "PASS  contract/release-running-busy")
	assert.Contains(t, out, "total: 2 checks, 2 passed, 0 skipped, 0 failed")
	raw, err := os.ReadFile(junit)
	require.NoError(t, err)
	var doc struct {
		Tests  int `xml:"tests,attr"`
		Suites []struct {
			Cases []struct {
				Name string `xml:"name,attr"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	require.NoError(t, xml.Unmarshal(raw, &doc))
	assert.Equal(t, 2, doc.Tests)
	require.FileExists(t, js)

	out, err = runConformance(t, "--plugin", plugin, "--run", only, "--param", "misbehave=release-running:0.1", "--repeat", "100")
	require.Error(t, err, out)
	assert.Contains(t, err.Error(), "contract/release-running-busy")
	assert.Contains(t, out, "FAIL  contract/release-running-busy")

	out, err = runConformance(t, "--plugin", plugin, "--run", only, "--rings", "off")
	require.NoError(t, err, out)
	assert.Contains(t, out, "total: 2 checks, 2 passed, 0 skipped, 0 failed")
}

// TestConformanceCommandArgs: bad flags are refused before anything runs.
func TestConformanceCommandArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"malformed param", []string{"--param", "novalue"}, "want key=value"},
		{"rings", []string{"--rings", "maybe"}, "say on or off"},
		{"repeat", []string{"--repeat", "0"}, "--repeat 0: give at least 1"},
		{"bad regexp", []string{"--run", "("}, "--run"},
		{"missing plugin", []string{"--plugin", filepath.Join(t.TempDir(), "nope")}, "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runConformance(t, tc.args...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	out, err := runConformance(t, "--list")
	require.NoError(t, err)
	assert.Contains(t, out, "peer-loss/bounded\n")
	// Each check comes with its rule, not only its name.
	for _, c := range conformance.Rules() {
		require.NotEmpty(t, c.Rule, "check %s states no rule", c.Name)
		assert.Contains(t, out, c.Name+"\n    "+c.Rule+"\n")
	}
}
