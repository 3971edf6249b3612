package main

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

// TestBenchSDKPrintsGoals runs a short `bench --sdk` against the fake and
// checks the lines CI reads: one per way, and the goal lines.
func TestBenchSDKPrintsGoals(t *testing.T) {
	if testing.Short() {
		t.Skip("launches transport processes")
	}
	dir, err := testbin.Build(t.TempDir(), "custody-transport-fake", drive.ReferenceProgram)
	require.NoError(t, err)
	var out bytes.Buffer
	err = runSDKBench(t.Context(), &out, sdkBenchConfig{plugin: filepath.Join(dir, "custody-transport-fake"), reference: filepath.Join(dir, drive.ReferenceProgram),
		minTime: 20 * time.Millisecond, repeat: 1, idle: 50 * time.Millisecond})
	require.NoError(t, err, out.String())
	for _, way := range []string{"in-process", "rings", "grpc"} {
		assert.Regexp(t, regexp.MustCompile(`(?m)^\s+`+way+`\s+[0-9.]+\s+[0-9.]+\s+[0-9]+$`), out.String())
	}
	for _, g := range []string{"sdk-post-done-p50-ratio value=[0-9.]+ target=2", "sdk-completions-ratio value=[0-9.]+ target=0.8", "sdk-idle-transport-cpu value=[0-9.]+ target=0.005", "sdk-idle-host-cpu value=[0-9.]+ target=0.005"} {
		assert.Regexp(t, regexp.MustCompile(`(?m)^goal name=`+g+` met=(yes|no)$`), out.String())
	}
	assert.Contains(t, out.String(), "method:", "the output says how it measured")
}

func TestSDKGoalLine(t *testing.T) {
	var out bytes.Buffer
	sdkGoal(&out, "a", 1.5, 2, false)
	sdkGoal(&out, "b", 2.5, 2, false)
	sdkGoal(&out, "c", 0.9, 0.8, true)
	sdkGoal(&out, "d", 0.7, 0.8, true)
	assert.Equal(t, "goal name=a value=1.500 target=2 met=yes\ngoal name=b value=2.500 target=2 met=no\ngoal name=c value=0.900 target=0.8 met=yes\ngoal name=d value=0.700 target=0.8 met=no\n", out.String())
}
