package bench

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// buildUCX builds custody-transport-ucx into a temporary directory, or
// returns $CUSTODY_UCX_PLUGIN when set.
func buildUCX(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CUSTODY_UCX_PLUGIN"); p != "" {
		return p
	}
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", dir, "github.com/custody-dev/custody/plugins/ucx/cmd/custody-transport-ucx").CombinedOutput()
	require.NoError(t, err, "build the ucx transport: %s", out)
	return filepath.Join(dir, "custody-transport-ucx")
}

// TestBenchPrintsRatios runs a short bench over tcp between two UCX
// processes and against ucx_perftest, and checks the lines CI reads.
func TestBenchPrintsRatios(t *testing.T) {
	if testing.Short() {
		t.Skip("launches transport processes and ucx_perftest")
	}
	perftest, err := exec.LookPath("ucx_perftest")
	if err != nil {
		t.Skip("ucx_perftest not installed (Debian ucx-utils)")
	}
	t.Setenv("UCX_TLS", "") // BW sets it from the tls parameter
	var out bytes.Buffer
	err = BW(t.Context(), &out, BWConfig{
		Plugin: buildUCX(t), Params: map[string]string{"tls": "tcp"},
		Sizes: []int{4096, 1 << 20}, Perftest: perftest, Rounds: Rounds{MinTime: 10 * time.Millisecond},
	})
	require.NoError(t, err, out.String())
	for _, size := range []string{"4096", "1048576"} {
		for _, op := range []string{"write", "read"} {
			assert.Regexp(t, regexp.MustCompile(`(?m)^ratio size=`+size+` op=`+op+` value=[0-9]+\.[0-9]{3}$`), out.String())
			assert.Regexp(t, regexp.MustCompile(`(?m)^ratio-heap size=`+size+` op=`+op+` value=[0-9]+\.[0-9]{3}$`), out.String(), "the second reference is labelled apart")
		}
	}
	assert.Contains(t, out.String(), "method:", "the output says how it measured")
	assert.Contains(t, out.String(), "perftest-heap:", "the output says which path each reference takes")
}
