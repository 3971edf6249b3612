package ucx_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/plugins/ucx"
	"github.com/custody-dev/custody/sdk"
)

// pair is two open in-process agents, a with b loaded as its peer, each
// with one region of its own.
type pair struct {
	a, b       *ucx.Transport
	ra, rb     sdk.RegionID
	memA, memB []byte // the regions as this test maps them
	peer       sdk.PeerID
}

// newPair opens two agents over tls with regions of n bytes, and tears
// everything down at cleanup, requiring that nothing stays held.
func newPair(tb testing.TB, tls string, n int) *pair {
	tb.Helper()
	ctx := context.Background()
	p := &pair{a: ucx.New(), b: ucx.New()}
	dir := tb.TempDir()
	for i, tr := range []*ucx.Transport{p.a, p.b} {
		name := []string{"a", "b"}[i]
		require.NoError(tb, tr.Open(ctx, sdk.OpenRequest{Agent: name, Params: map[string]string{"tls": tls}}))
		path := filepath.Join(dir, name)
		mem := mapFile(tb, path, n)
		reg, err := tr.RegisterMemory(ctx, []sdk.Region{{Path: path, Length: uint64(n), Kind: sdk.MemoryHost}})
		require.NoError(tb, err)
		require.NoError(tb, reg[0].Err)
		if i == 0 {
			p.ra, p.memA = reg[0].ID, mem
		} else {
			p.rb, p.memB = reg[0].ID, mem
		}
	}
	md, err := p.b.LocalMetadata(ctx)
	require.NoError(tb, err)
	res, err := p.a.LoadPeers(ctx, []sdk.PeerSpec{{Name: "b", Metadata: md}})
	require.NoError(tb, err)
	require.NoError(tb, res[0].Err)
	p.peer = res[0].ID
	tb.Cleanup(func() {
		errs, err := p.a.UnloadPeers(ctx, []sdk.PeerID{p.peer})
		require.NoError(tb, err)
		require.NoError(tb, errs[0])
		for _, x := range []struct {
			tr *ucx.Transport
			r  sdk.RegionID
		}{{p.a, p.ra}, {p.b, p.rb}} {
			errs, err := x.tr.DeregisterMemory(ctx, []sdk.RegionID{x.r})
			require.NoError(tb, err)
			require.NoError(tb, errs[0])
			require.NoError(tb, x.tr.Close(ctx))
		}
	})
	return p
}

// mapFile creates a file of n bytes and maps it as the engine would.
func mapFile(tb testing.TB, path string, n int) []byte {
	tb.Helper()
	f, err := os.Create(path)
	require.NoError(tb, err)
	defer f.Close()
	require.NoError(tb, f.Truncate(int64(n)))
	b, err := syscall.Mmap(int(f.Fd()), 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = syscall.Munmap(b) })
	return b
}

// dlists prepares, on a, a local and a remote dlist of k descriptors of
// size bytes each, at the same offsets in both regions.
func (p *pair) dlists(tb testing.TB, k, size int) (local, remote sdk.DlistID) {
	tb.Helper()
	var ld, rd []sdk.Descriptor
	for i := range k {
		ld = append(ld, sdk.Descriptor{Region: p.ra, Offset: uint64(i * size), Length: uint64(size)})
		rd = append(rd, sdk.Descriptor{Region: p.rb, Offset: uint64(i * size), Length: uint64(size)})
	}
	res, err := p.a.PrepareDescriptors(context.Background(), []sdk.DlistSpec{{Descriptors: ld}, {Peer: p.peer, Descriptors: rd}})
	require.NoError(tb, err)
	require.NoError(tb, res[0].Err)
	require.NoError(tb, res[1].Err)
	tb.Cleanup(func() {
		errs, err := p.a.ReleaseDescriptors(context.Background(), []sdk.DlistID{res[0].ID, res[1].ID})
		require.NoError(tb, err)
		require.NoError(tb, errors.Join(errs...))
	})
	return res[0].ID, res[1].ID
}

// settle polls ids until all are terminal (bounded) and releases them,
// returning their final statuses.
func settle(tb testing.TB, tr *ucx.Transport, ids []sdk.HandleID) []sdk.HandleStatus {
	tb.Helper()
	ctx := context.Background()
	var sts []sdk.HandleStatus
	require.Eventually(tb, func() bool {
		var err error
		sts, err = tr.Poll(ctx, ids)
		require.NoError(tb, err)
		for _, st := range sts {
			require.NoError(tb, st.Err)
			if !st.State.Terminal() {
				return false
			}
		}
		return true
	}, time.Minute, 50*time.Microsecond)
	errs, err := tr.Release(ctx, ids)
	require.NoError(tb, err)
	require.NoError(tb, errors.Join(errs...))
	return sts
}

// pollDone polls ids in a loop until all are terminal (for at most a
// minute) and releases them, returning their final statuses. Benchmarks
// use it rather than settle: settle's Eventually ticks every 50 µs, which
// Go's timers round up to about a millisecond when no goroutine keeps a
// processor busy, so a benchmark would measure the ticker.
func pollDone(tb testing.TB, tr *ucx.Transport, ids []sdk.HandleID) []sdk.HandleStatus {
	tb.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for {
		// No require in the loop: each require call walks the stack
		// (Helper), which would make this poller the busiest thread.
		sts, err := tr.Poll(ctx, ids)
		if err != nil {
			tb.Fatalf("Poll: %v", err)
		}
		done := true
		for _, st := range sts {
			if st.Err != nil {
				tb.Fatalf("Poll of a handle: %v", st.Err)
			}
			done = done && st.State.Terminal()
		}
		if done {
			errs, err := tr.Release(ctx, ids)
			require.NoError(tb, err)
			require.NoError(tb, errors.Join(errs...))
			return sts
		}
		if time.Now().After(deadline) {
			tb.Fatal("handles still running after a minute")
		}
		runtime.Gosched()
	}
}
