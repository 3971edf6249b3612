package ring

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/plugins/fake"
	"github.com/custody-dev/custody/sdk"
)

// pair is both sides of the rings in one process, over an open fake: the
// host side as package plugin's Plugin runs it, the plugin side as its
// Serve runs it. kill stands for the fence (it ends the "process": done).
type pair struct {
	host   *Client
	server *Server
	// wake is the host side's ClientConfig.Wake.
	wake   chan struct{}
	impl   *fake.Transport
	kills  atomic.Int32
	local  sdk.DlistID
	remote sdk.DlistID
	peer   sdk.PeerID
	regs   []sdk.RegionID
	// exit stands for the process's exit: it ends done.
	exit func()
}

func newPair(t *testing.T) *pair {
	t.Helper()
	return newPairOf(t, nil, 10*time.Second)
}

// newPairOf serves wrap(the fake) (the fake itself when wrap is nil), with
// the host's call timeout.
func newPairOf(t *testing.T, wrap func(sdk.Transport) sdk.Transport, timeout time.Duration) *pair {
	t.Helper()
	return newPairWith(t, pairConfig{wrap: wrap, timeout: timeout})
}

// pairConfig is how newPairWith builds a pair: the host's call timeout,
// wrap as in newPairOf, the fake's Open params, and whether the pair runs
// release at terminal.
type pairConfig struct {
	wrap            func(sdk.Transport) sdk.Transport
	timeout         time.Duration
	params          map[string]string
	releaseTerminal bool
}

func newPairWith(t *testing.T, cfg pairConfig) *pair {
	t.Helper()
	wrap, timeout, params := cfg.wrap, cfg.timeout, cfg.params
	ctx := context.Background()
	impl := fake.New()
	dir := t.TempDir()
	ps := map[string]string{"dir": dir}
	for k, v := range params {
		ps[k] = v
	}
	require.NoError(t, impl.Open(ctx, sdk.OpenRequest{Agent: "a", Params: ps}))
	file, err := fake.NewRegionFile(dir, 128<<10)
	require.NoError(t, err)
	regs, err := impl.RegisterMemory(ctx, []sdk.Region{{Path: file, Length: 64 << 10, Kind: sdk.MemoryHost}, {Path: file, Offset: 64 << 10, Length: 64 << 10, Kind: sdk.MemoryHost}})
	require.NoError(t, err)
	md, err := impl.LocalMetadata(ctx)
	require.NoError(t, err)
	peers, err := impl.LoadPeers(ctx, []sdk.PeerSpec{{Name: "a", Metadata: md}})
	require.NoError(t, err)
	lists, err := impl.PrepareDescriptors(ctx, []sdk.DlistSpec{
		{Descriptors: []sdk.Descriptor{{Region: regs[0].ID, Length: 4096}}},
		{Peer: peers[0].ID, Descriptors: []sdk.Descriptor{{Region: regs[1].ID, Length: 4096}}},
	})
	require.NoError(t, err)

	mem, path, remove, err := CreateFile(smallLayout)
	require.NoError(t, err)
	pmem, l, err := AttachFile(path)
	require.NoError(t, err)
	remove()

	done, exit := context.WithCancel(context.Background())
	pr := &pair{impl: impl, local: lists[0].ID, remote: lists[1].ID, peer: peers[0].ID, regs: []sdk.RegionID{regs[0].ID, regs[1].ID}, exit: exit}
	pr.wake = make(chan struct{}, 1)
	pr.host = NewClient(mem, smallLayout, ClientConfig{
		Name: "test transport", Timeout: timeout, Done: done, Shutdown: exitError,
		Log: nopLog{}, Kill: func() error { pr.kills.Add(1); exit(); return nil }, Wake: pr.wake,
		Events: true, ReleaseTerminal: cfg.releaseTerminal,
	})
	var served sdk.Transport = impl
	if wrap != nil {
		served = wrap(impl)
	}
	pr.server = NewServer(ctx, served, pmem, l, nopLog{}, cfg.releaseTerminal)
	t.Cleanup(func() {
		pr.server.stop()
		exit()
		<-pr.host.readerDone
		pr.teardown(t)
	})
	return pr
}

// teardown releases what the fake holds, so that Close ends it.
func (pr *pair) teardown(t *testing.T) {
	ctx := context.Background()
	require.Eventually(t, func() bool {
		r, err := pr.impl.Resources(ctx)
		require.NoError(t, err)
		return r.InFlight == 0
	}, 10*time.Second, time.Millisecond)
	for id := sdk.HandleID(1); id < 1000; id++ {
		_, _ = pr.impl.Release(ctx, []sdk.HandleID{id})
	}
	_, err := pr.impl.ReleaseDescriptors(ctx, []sdk.DlistID{pr.local, pr.remote})
	require.NoError(t, err)
	_, err = pr.impl.UnloadPeers(ctx, []sdk.PeerID{pr.peer})
	require.NoError(t, err)
	_, err = pr.impl.DeregisterMemory(ctx, pr.regs)
	require.NoError(t, err)
	require.NoError(t, pr.impl.Close(ctx))
}

// spec is one 4 KiB WRITE from the local dlist into the remote one.
func (pr *pair) spec() sdk.PostSpec {
	return sdk.PostSpec{Op: sdk.OpWrite, Local: pr.local, LocalIndices: []uint32{0}, Remote: pr.remote, RemoteIndices: []uint32{0}}
}

func (pr *pair) post(t *testing.T, n int) []sdk.PostResult {
	t.Helper()
	var w wire
	for range n {
		w = encodePostSpec(w, pr.spec())
	}
	c, err := pr.host.submit(context.Background(), "Post", kindPost, kindPostResult, n, nil, w)
	require.NoError(t, err)
	return c.posts
}

// TestRingPairCarriesTheContract: Post, completions and Release through
// the rings give exactly what the transport answers, many times over
// (the small rings wrap), and the Waker channel fires.
func TestRingPairCarriesTheContract(t *testing.T) {
	pr := newPair(t)
	for range 50 {
		res := pr.post(t, 3)
		require.Len(t, res, 3)
		ids := []sdk.HandleID{res[0].ID, res[1].ID, res[2].ID}
		for _, r := range res {
			require.NoError(t, r.Err)
		}
		for _, id := range ids {
			require.Eventually(t, func() bool {
				pr.host.drain()
				pr.host.mu.Lock()
				defer pr.host.mu.Unlock()
				return pr.host.known[id].terminal
			}, 10*time.Second, 10*time.Microsecond)
			pr.host.mu.Lock()
			assert.Equal(t, sdk.StateDone, pr.host.known[id].st.State)
			pr.host.mu.Unlock()
		}
		c, err := pr.host.submit(context.Background(), "Release", kindRelease, kindReleaseRes, 4, append(ids, ids[0]), encodeIDs(nil, append(ids, ids[0])))
		require.NoError(t, err)
		want, werr := pr.impl.Release(context.Background(), []sdk.HandleID{ids[0]})
		require.NoError(t, werr)
		assert.Equal(t, []error{nil, nil, nil, want[0]}, c.errs, "the transport's own answer to a second release")
		pr.host.mu.Lock()
		assert.NotContains(t, pr.host.known, ids[0], "a released handle is forgotten")
		pr.host.mu.Unlock()
	}
	select {
	case <-pr.wake:
	default:
		t.Fatal("completions arrived but Wake's channel holds nothing")
	}
	// A bad post: the transport's own code and message.
	var w wire
	w = encodePostSpec(w, sdk.PostSpec{Op: 9, Local: pr.local, Remote: pr.remote})
	c, err := pr.host.submit(context.Background(), "Post", kindPost, kindPostResult, 1, nil, w)
	require.NoError(t, err)
	want, _ := pr.impl.Post(context.Background(), []sdk.PostSpec{{Op: 9, Local: pr.local, Remote: pr.remote}})
	assert.Equal(t, want[0].Err, c.posts[0].Err)
	assert.Equal(t, int32(0), pr.kills.Load(), "no fence")
}

// TestRingPairHostFencesOnGarbage: a completion ring that makes no sense
// fences the transport, and the pending call and every later one end
// PLUGIN_SHUTDOWN naming the violation.
func TestRingPairHostFencesOnGarbage(t *testing.T) {
	pr := newPair(t)
	pr.post(t, 1)
	// The plugin side stops, and its tail jumps a ring ahead.
	pr.server.stop()
	pr.host.m.comp.tail.Add(100)
	pr.host.m.host.force()
	_, err := pr.host.submit(context.Background(), "Post", kindPost, kindPostResult, 0, nil, nil)
	require.ErrorIs(t, err, sdk.ErrPluginShutdown)
	assert.Contains(t, err.Error(), "producer tail")
	assert.Contains(t, err.Error(), "fenced")
	assert.Equal(t, int32(1), pr.kills.Load(), "killed once")
}

// TestRingPairPluginRefusesGarbage: a submission that makes no sense stops
// the plugin side, which says why; the host fences.
func TestRingPairPluginRefusesGarbage(t *testing.T) {
	pr := newPair(t)
	pr.host.subMu.Lock()
	ent, _, off, err := pr.host.sub.reserve(0)
	require.NoError(t, err)
	e := entry{seq: pr.host.sub.tail, kind: 77, arenaOff: off}
	e.encode(ent)
	pr.host.sub.publish()
	pr.host.m.plugin.ring()
	pr.host.subMu.Unlock()
	require.Eventually(t, func() bool { return pr.kills.Load() == 1 }, 10*time.Second, time.Millisecond, "the host fenced")
	<-pr.server.done
	_, err = pr.host.submit(context.Background(), "Release", kindRelease, kindReleaseRes, 0, nil, nil)
	require.ErrorIs(t, err, sdk.ErrPluginShutdown)
	assert.Contains(t, err.Error(), "unknown kind 77")
}

// slowPost makes the first Post wait until the test lets it go (a
// transport that overruns its deadline).
type slowPost struct {
	sdk.Transport
	calls atomic.Int32
	let   chan struct{}
}

func (s *slowPost) Post(ctx context.Context, posts []sdk.PostSpec) ([]sdk.PostResult, error) {
	if s.calls.Add(1) == 1 {
		<-s.let
	}
	return s.Transport.Post(ctx, posts)
}

// TestRingPairCallDeadline: a call whose answer does not come before its
// deadline ends TIMEOUT; its late answer is matched to it and dropped, and
// the next call gets its own answer.
func TestRingPairCallDeadline(t *testing.T) {
	let := make(chan struct{})
	pr := newPairOf(t, func(tr sdk.Transport) sdk.Transport { return &slowPost{Transport: tr, let: let} }, 50*time.Millisecond)
	var w wire
	w = encodePostSpec(w, pr.spec())
	_, err := pr.host.submit(context.Background(), "Post", kindPost, kindPostResult, 1, nil, w)
	require.ErrorIs(t, err, sdk.ErrTimeout)
	assert.Contains(t, err.Error(), "did not answer through its rings before the call's deadline")
	close(let)
	pr.host.timeout = 10 * time.Second
	res := pr.post(t, 1)
	require.NoError(t, res[0].Err)
	assert.Equal(t, int32(0), pr.kills.Load(), "a late answer is no violation")
}

// TestRingPairExitUnderPendingCall: a call waiting in the rings when the
// process exits returns PLUGIN_SHUTDOWN at once, not at its deadline.
func TestRingPairExitUnderPendingCall(t *testing.T) {
	let := make(chan struct{})
	slow := &slowPost{let: let}
	pr := newPairOf(t, func(tr sdk.Transport) sdk.Transport { slow.Transport = tr; return slow }, time.Hour)
	defer close(let)
	var w wire
	w = encodePostSpec(w, pr.spec())
	errc := make(chan error, 1)
	go func() {
		_, err := pr.host.submit(context.Background(), "Post", kindPost, kindPostResult, 1, nil, w)
		errc <- err
	}()
	require.Eventually(t, func() bool { return slow.calls.Load() == 1 }, 10*time.Second, time.Millisecond, "the Post reached the transport")
	pr.exit()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, sdk.ErrPluginShutdown)
		assert.Contains(t, err.Error(), "exited")
	case <-time.After(10 * time.Second):
		t.Fatal("the pending call did not end when the process exited")
	}
}

// TestRingPairWakeAfterPollLoop: while a caller Polls in a loop the reader
// naps, and the plugin does not wake it; once the caller stops polling and
// waits on Wake instead, a completion still reaches it, with nobody but
// the reader draining the ring. The fake pauses between the chunks of a
// transfer, so that the caller's Poll comes before the completion.
func TestRingPairWakeAfterPollLoop(t *testing.T) {
	pr := newPairWith(t, pairConfig{timeout: 10 * time.Second, params: map[string]string{"chunk": "1024", "chunk_delay": "1ms"}})
	p, _ := pr.calls()
	ctx := context.Background()
	for range 5 {
		id := pr.post(t, 1)[0].ID
		sts, err := p.Poll(ctx, []sdk.HandleID{id})
		require.NoError(t, err)
		// Stop polling: from here only Wake tells.
		deadline := time.After(10 * time.Second)
		for !sts[0].State.Terminal() {
			select {
			case <-pr.wake:
			case <-deadline:
				t.Fatal("the completion did not reach Wake once the caller stopped polling")
			}
			pr.host.mu.Lock()
			k := pr.host.known[id]
			pr.host.mu.Unlock()
			if k.terminal {
				sts[0] = k.st
			}
		}
		require.Equal(t, sdk.StateDone, sts[0].State)
		errs, err := p.Release(ctx, []sdk.HandleID{id})
		require.NoError(t, err)
		require.NoError(t, errs[0])
	}
}
