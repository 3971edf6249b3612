package bench

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/internal/drive"
	"github.com/custody-dev/custody/internal/testbin"
)

// TestBenchE2EPrintsItsGoalLine runs a short e2e bench on the fake and
// checks the figures and the goal line CI reads.
func TestBenchE2EPrintsItsGoalLine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two hosts")
	}
	dir, err := testbin.Build(t.TempDir(), "custody", "custody-transport-fake", drive.ReferenceProgram)
	require.NoError(t, err)
	var out bytes.Buffer
	err = E2E(t.Context(), &out, E2EConfig{HostsConfig: HostsConfig{Custody: filepath.Join(dir, "custody"), Transport: "fake",
		Concurrency: 4, Duration: 100 * time.Millisecond, BlockSize: 16 << 10}, Reference: filepath.Join(dir, drive.ReferenceProgram), Pulls: 10})
	require.NoError(t, err, out.String())
	num := `[0-9]+\.[0-9]us`
	for _, re := range []string{
		`(?m)^e2e pull latency +p50 ` + num + ` +p99 ` + num + ` +\(10 pulls\)$`,
		`(?m)^e2e pulls/s at 4 +[1-9][0-9]*$`,
		`(?m)^in-process Post→DONE +p50 ` + num,
		`(?m)^bare gRPC unary RTT +p50 ` + num,
		`(?m)^goal name=e2e-pull-p50 value=` + num + ` target=` + num + ` met=(yes|no)$`,
		`(?m)^goal name=e2e-pull-cpu value=` + num + ` target=` + num + ` met=(yes|no)$`,
	} {
		assert.Regexp(t, regexp.MustCompile(re), out.String())
	}
	// The Read call is a part of each pull: its p50 is positive and at most
	// the pull's.
	p50 := func(what string) float64 {
		m := regexp.MustCompile(`(?m)^` + what + ` +p50 ([0-9.]+)us`).FindStringSubmatch(out.String())
		require.NotNil(t, m, "%s has its line", what)
		v, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		return v
	}
	read, pull := p50("e2e read call"), p50("e2e pull latency")
	assert.Greater(t, read, 0.0, "the Read call took time")
	assert.LessOrEqual(t, read, pull, "the Read call is a part of the pull")
	// Every process of a pull and of the round trip has its row, and each
	// of them worked for it: CPU, and (where the kernel lets this process
	// count them) system calls.
	counted := !strings.Contains(out.String(), "system calls not counted")
	for _, name := range []string{`engine side \(this process\)`, "decode host", "decode transport", "prefill host", "prefill transport",
		`client \(this process\)`, "server", "all"} {
		row := regexp.MustCompile(`(?m)^  ` + name + ` +([0-9.]+)us +([0-9.]+) +([0-9.]+)$`).FindStringSubmatch(out.String())
		if !assert.NotNil(t, row, name) {
			continue
		}
		assert.NotEqual(t, "0.0", row[1], "%s: CPU", name)
		if counted {
			assert.NotEqual(t, "0.0", row[2], "%s: system calls", name)
		}
	}
	if counted {
		assert.Regexp(t, `(?m)^goal name=e2e-pull-syscalls value=[0-9.]+ target=[0-9.]+ met=(yes|no)$`, out.String())
	}
	assert.Contains(t, out.String(), "method:", "the output says how it measured")
	assert.Contains(t, out.String(), "fake: fence=initiated", "the output says how the fake copies")
}

// TestBenchE2EFakeCopiesAsInitiator: unless --param fence= says otherwise,
// the fake copies as the initiator in the hosts and in the in-process
// reference alike, and the output says so; a fence given is kept.
func TestBenchE2EFakeCopiesAsInitiator(t *testing.T) {
	c := HostsConfig{Custody: "custody", Transport: "fake", Concurrency: 1, Duration: time.Second, BlockSize: 1,
		Params: map[string]string{"chunk": "4096"}}
	assert.Contains(t, c.fakeFence(), "fence=initiated")
	assert.Equal(t, map[string]string{"chunk": "4096", "fence": "initiated"}, c.Params)

	c = HostsConfig{Custody: "custody", Transport: "fake", Concurrency: 1, Duration: time.Second, BlockSize: 1,
		Params: map[string]string{"fence": "incoming"}}
	assert.Empty(t, c.fakeFence())
	assert.Equal(t, map[string]string{"fence": "incoming"}, c.Params, "a fence given is kept")

	c = HostsConfig{Custody: "custody", Transport: "ucx", Concurrency: 1, Duration: time.Second, BlockSize: 1}
	assert.Empty(t, c.fakeFence())
	assert.NotContains(t, c.Params, "fence", "only the fake has the parameter")
}

func TestBenchE2ERefusesBadFlags(t *testing.T) {
	for _, c := range []E2EConfig{
		{HostsConfig: HostsConfig{Transport: "tcp", Concurrency: 1, Duration: time.Second, BlockSize: 1}, Pulls: 1},
		{HostsConfig: HostsConfig{Transport: "fake", Concurrency: 1, Duration: time.Second, BlockSize: 1}, Pulls: 0},
		{HostsConfig: HostsConfig{Transport: "fake", Concurrency: 0, Duration: time.Second, BlockSize: 1}, Pulls: 1},
		{HostsConfig: HostsConfig{Transport: "fake", Concurrency: 1, Duration: 0, BlockSize: 1}, Pulls: 1},
		{HostsConfig: HostsConfig{Transport: "fake", Concurrency: 1, Duration: time.Second, BlockSize: 0}, Pulls: 1},
		{HostsConfig: HostsConfig{Transport: "fake", Concurrency: 1, Duration: time.Second, BlockSize: 1, Poll: -time.Millisecond}, Pulls: 1},
	} {
		assert.Error(t, c.Check(), "%+v", c)
	}
}
