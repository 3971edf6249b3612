package bench

import (
	"bytes"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/internal/drive"
	"github.com/custody-dev/custody/internal/testbin"
)

// TestBenchSDKPrintsGoals runs a short `bench sdk` against the fake and
// checks the lines CI reads: one per way, and the goal lines.
func TestBenchSDKPrintsGoals(t *testing.T) {
	if testing.Short() {
		t.Skip("launches transport processes")
	}
	dir, err := testbin.Build(t.TempDir(), "custody-transport-fake", drive.ReferenceProgram)
	require.NoError(t, err)
	var out bytes.Buffer
	err = SDK(t.Context(), &out, SDKConfig{Plugin: filepath.Join(dir, "custody-transport-fake"), Reference: filepath.Join(dir, drive.ReferenceProgram),
		Rounds: Rounds{MinTime: 20 * time.Millisecond, Repeat: 1}, Idle: 50 * time.Millisecond})
	require.NoError(t, err, out.String())
	for _, way := range []string{"in-process", "rings", "grpc"} {
		assert.Regexp(t, regexp.MustCompile(`(?m)^\s+`+way+`\s+[0-9.]+\s+[0-9.]+\s+[0-9]+$`), out.String())
	}
	for _, g := range []string{"sdk-post-done-p50-ratio value=[0-9.]+ target=2", "sdk-completions-ratio value=[0-9.]+ target=0.8", "sdk-idle-transport-cpu value=[0-9.]+ target=0.005", "sdk-idle-host-cpu value=[0-9.]+ target=0.005"} {
		assert.Regexp(t, regexp.MustCompile(`(?m)^goal name=`+g+` met=(yes|no)$`), out.String())
	}
	assert.Contains(t, out.String(), "method:", "the output says how it measured")
}
