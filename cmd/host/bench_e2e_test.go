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

// TestBenchE2EPrintsItsGoalLine runs a short --e2e bench on the fake and
// checks the figures and the goal line CI reads.
func TestBenchE2EPrintsItsGoalLine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two hosts")
	}
	dir, err := testbin.Build(t.TempDir(), "custody", "custody-transport-fake", drive.ReferenceProgram)
	require.NoError(t, err)
	var out bytes.Buffer
	err = runE2E(t.Context(), &out, e2eConfig{custody: filepath.Join(dir, "custody"), reference: filepath.Join(dir, drive.ReferenceProgram), transport: "fake",
		pulls: 10, concurrency: 4, duration: 100 * time.Millisecond, blockSize: 16 << 10})
	require.NoError(t, err, out.String())
	num := `[0-9]+\.[0-9]us`
	for _, re := range []string{
		`(?m)^e2e pull latency +p50 ` + num + ` +p99 ` + num + ` +\(10 pulls\)$`,
		`(?m)^e2e cost per pull +hosts and transports CPU ` + num + ` +switches [0-9]+\.[0-9];  engine \(this process\) CPU ` + num + ` +switches [0-9]+\.[0-9] `,
		`(?m)^e2e pulls/s at 4 +[1-9][0-9]*$`,
		`(?m)^in-process Post→DONE +p50 ` + num,
		`(?m)^bare gRPC unary RTT +p50 ` + num,
		`(?m)^goal name=e2e-pull-p50 value=` + num + ` target=` + num + ` met=(yes|no)$`,
	} {
		assert.Regexp(t, regexp.MustCompile(re), out.String())
	}
	assert.Contains(t, out.String(), "method:", "the output says how it measured")
	assert.Contains(t, out.String(), "fake: fence=initiated", "the output says how the fake copies")
}

// TestBenchE2EFakeCopiesAsInitiator: unless --param fence= says otherwise,
// the fake copies as the initiator in the hosts and in the in-process
// reference alike, and the output says so; a fence given is kept.
func TestBenchE2EFakeCopiesAsInitiator(t *testing.T) {
	c := e2eConfig{custody: "custody", transport: "fake", pulls: 1, concurrency: 1, duration: time.Second, blockSize: 1,
		params: map[string]string{"chunk": "4096"}}
	assert.Contains(t, c.fakeFence(), "fence=initiated")
	assert.Equal(t, map[string]string{"chunk": "4096", "fence": "initiated"}, c.params)

	c = e2eConfig{custody: "custody", transport: "fake", pulls: 1, concurrency: 1, duration: time.Second, blockSize: 1,
		params: map[string]string{"fence": "incoming"}}
	assert.Empty(t, c.fakeFence())
	assert.Equal(t, map[string]string{"fence": "incoming"}, c.params, "a fence given is kept")

	c = e2eConfig{custody: "custody", transport: "ucx", pulls: 1, concurrency: 1, duration: time.Second, blockSize: 1}
	assert.Empty(t, c.fakeFence())
	assert.NotContains(t, c.params, "fence", "only the fake has the parameter")
}

func TestBenchE2ERefusesBadFlags(t *testing.T) {
	for _, c := range []e2eConfig{
		{transport: "tcp", pulls: 1, concurrency: 1, duration: time.Second, blockSize: 1},
		{transport: "fake", pulls: 0, concurrency: 1, duration: time.Second, blockSize: 1},
		{transport: "fake", pulls: 1, concurrency: 0, duration: time.Second, blockSize: 1},
		{transport: "fake", pulls: 1, concurrency: 1, duration: 0, blockSize: 1},
		{transport: "fake", pulls: 1, concurrency: 1, duration: time.Second, blockSize: 0},
		{transport: "fake", pulls: 1, concurrency: 1, duration: time.Second, blockSize: 1, poll: -time.Millisecond},
	} {
		assert.Error(t, c.check(), "%+v", c)
	}
}
