package host

import (
	"context"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/client"
)

// transportPid is the pid of th's transport process now.
func (th *testHost) transportPid() int {
	th.t.Helper()
	var pid int
	require.NoError(th.t, th.h.do(th.ctx(), func(context.Context) error {
		require.NotNil(th.t, th.h.tp, "no transport running")
		pid = th.h.tp.Pid()
		return nil
	}))
	return pid
}

// slow makes the fake copy 4 KiB every 2 ms: a 64 KiB block takes ~32 ms.
var slow = []string{"chunk", "4096", "chunk_delay", "2ms"}

func TestTransportKilledMidTransferIsFencedAndRestarted(t *testing.T) {
	prefill := startHost(t, "prefill", 16, nil)
	decode := startHost(t, "decode", 16, func(c *Config) { c.Metrics.Listen = "127.0.0.1:0" }, slow...)
	decode.connect("prefill", prefill)

	_, dst := pull(t, prefill, decode, "r1", 8)
	require.Eventually(t, func() bool {
		st, err := decode.c.Status(decode.ctx())
		return err == nil && st.InFlight > 0
	}, 10*time.Second, time.Millisecond, "the read never started")
	oldPid := decode.transportPid()
	require.NoError(t, syscall.Kill(oldPid, syscall.SIGKILL))

	f := decode.waitFinished("r1")
	assert.Equal(t, []string{"r1"}, failedIDs(f), "the fenced request fails, exactly once")
	assert.Equal(t, []string{"r1"}, f.FinishedRecving)
	assert.ElementsMatch(t, refsOf(decode.poolID, dst), f.InvalidBlocks, "its blocks come back invalid in the same report")

	st, err := decode.c.Status(decode.ctx())
	require.NoError(t, err)
	assert.Equal(t, uint64(1), st.Fences)
	assert.Equal(t, uint64(1), st.TransportRestarts)
	assert.Equal(t, uint64(2), st.Epoch)
	assert.NotEqual(t, oldPid, decode.transportPid())
	m := scrape(t, decode.h.MetricsAddr())
	assert.Contains(t, m, "custody_fences_total 1\n")
	assert.Contains(t, m, "custody_transport_restarts_total 1\n")
	assert.Contains(t, m, `custody_requests_total{outcome="failed"} 1`+"\n")

	// The peer is connected again on demand and the next request succeeds.
	src, dst2 := pull(t, prefill, decode, "r2", 2)
	f = decode.waitFinished("r2")
	assert.Equal(t, []string{"r2"}, f.FinishedRecving)
	assert.Empty(t, f.Failed)
	sameBlocks(t, src, decode.read(dst2), "r2")
}

func TestWedgedTransferEscalatesAtTheCapToAFence(t *testing.T) {
	prefill := startHost(t, "prefill", 16, nil)
	decode := startHost(t, "decode", 16, func(c *Config) { c.Escalation.Cap = 300 * time.Millisecond },
		"fault", "stall,post=1")
	decode.connect("prefill", prefill)

	_, dst := pull(t, prefill, decode, "r1", 2)
	f := decode.waitFinished("r1")
	assert.Equal(t, []string{"r1"}, failedIDs(f))
	assert.ElementsMatch(t, refsOf(decode.poolID, dst), f.InvalidBlocks)
	assert.Empty(t, f.Quarantined, "a fence proves the transfer stopped: nothing is quarantined")

	st, err := decode.c.Status(decode.ctx())
	require.NoError(t, err)
	assert.Equal(t, uint64(1), st.Fences, "the cap escalated to a fence")
	assert.Equal(t, uint64(2), st.Epoch, "a new transport runs")
	// (Recovery after a fence is TestTransportKilledMidTransferIsFencedAndRestarted's;
	// here the new process would stall its first post again, as configured.)
}

// scrape returns the metrics text a host serves at addr.
func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}

func refsOf(pool uint32, blocks []uint32) []client.BlockRef {
	out := make([]client.BlockRef, len(blocks))
	for i, b := range blocks {
		out[i] = client.BlockRef{Pool: pool, Block: b}
	}
	return out
}
