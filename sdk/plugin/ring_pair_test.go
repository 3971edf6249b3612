package plugin

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/custody-dev/custody/plugins/fake"
	"github.com/custody-dev/custody/sdk"
	pb "github.com/custody-dev/custody/sdk/plugin/proto/custody/transport/v1"
)

// pair is both sides of the rings in one process, over an open fake: the
// host side as Plugin runs it, the plugin side as Serve runs it. kill
// stands for the fence (it ends the "process": done).
type pair struct {
	host   *ringHost
	grpc   *grpcClient // the host side's gRPC client, which Plugins over host use
	server *ringServer
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

	mem, path, remove, err := createRingFile(smallLayout)
	require.NoError(t, err)
	pmem, l, err := attachRingFile(path)
	require.NoError(t, err)
	remove()

	done, exit := context.WithCancel(context.Background())
	pr := &pair{impl: impl, local: lists[0].ID, remote: lists[1].ID, peer: peers[0].ID, regs: []sdk.RegionID{regs[0].ID, regs[1].ID}, exit: exit}
	pr.grpc = &grpcClient{done: done, timeout: timeout, name: "test transport"}
	pr.host = newRingHost(mem, smallLayout, ringHostConfig{
		name: pr.grpc.name, timeout: timeout, done: done, shutdown: pr.grpc.fenced,
		log: hclog.NewNullLogger(), kill: func() error { pr.kills.Add(1); exit(); return nil }, wake: make(chan struct{}, 1),
		events: true, releaseTerminal: cfg.releaseTerminal,
	})
	var served sdk.Transport = impl
	if wrap != nil {
		served = wrap(impl)
	}
	pr.server = newRingServer(ctx, served, pmem, l, hclog.NewNullLogger(), cfg.releaseTerminal)
	pr.server.start()
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
	case <-pr.host.wake:
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
	e := ringEntry{seq: pr.host.sub.tail, kind: 77, arenaOff: off}
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

// noGRPC is a gRPC client whose every call fails: a Plugin over it proves
// that what it answers came through the rings.
type noGRPC struct {
	pb.TransportClient
	sends, cancels atomic.Int32
}

func (n *noGRPC) Cancel(context.Context, *pb.IDs, ...grpc.CallOption) (*pb.Statuses, error) {
	n.cancels.Add(1)
	return nil, status.Error(codes.Internal, "this call went over gRPC")
}

func (n *noGRPC) SendNotifications(context.Context, *pb.SendNotificationsRequest, ...grpc.CallOption) (*pb.Statuses, error) {
	n.sends.Add(1)
	return nil, status.Error(codes.Internal, "this call went over gRPC")
}

// TestRingPairSendNotifications: SendNotifications travels through the
// rings with the transport's own answer per item, the message reaches the
// peer, and a batch too large for the submission ring goes over gRPC.
func TestRingPairSendNotifications(t *testing.T) {
	pr := newPair(t)
	rpc := &noGRPC{}
	pr.grpc.rpc = rpc
	p := &Plugin{grpc: pr.grpc}
	p.rings.Store(pr.host)

	msgs := []sdk.OutboundNotification{{Peer: pr.peer, Message: []byte("hello")}, {Peer: pr.peer + 99, Message: []byte("nobody")}, {Peer: pr.peer}}
	errs, err := p.SendNotifications(context.Background(), msgs)
	require.NoError(t, err)
	require.Len(t, errs, 3)
	assert.NoError(t, errs[0])
	want, werr := pr.impl.SendNotifications(context.Background(), msgs[1:2])
	require.NoError(t, werr)
	require.Error(t, want[0])
	assert.Equal(t, want[0], errs[1], "the transport's own answer to an unknown peer")
	assert.NoError(t, errs[2], "an empty message is allowed")
	assert.Zero(t, rpc.sends.Load(), "nothing went over gRPC")

	var got []sdk.Notification
	deadline := time.After(10 * time.Second)
	for len(got) < 2 {
		ns, err := p.Notifications(context.Background(), 0)
		require.NoError(t, err)
		got = append(got, ns...)
		if len(got) >= 2 {
			break
		}
		select {
		case <-pr.host.wake:
		case <-deadline:
			t.Fatalf("the notifications sent through the rings did not arrive; got %v", got)
		}
	}
	assert.Equal(t, []sdk.Notification{{From: "a", Message: []byte("hello")}, {From: "a"}}, got)

	huge := []sdk.OutboundNotification{{Peer: pr.peer, Message: make([]byte, pr.host.half)}}
	_, err = p.SendNotifications(context.Background(), huge)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "this call went over gRPC")
	assert.Equal(t, int32(1), rpc.sends.Load(), "a batch past half the arena goes over gRPC")
	assert.Equal(t, int32(0), pr.kills.Load(), "no fence")
}

// TestRingPairPluginRefusesBadNotifications: a SendNotifications
// submission whose payload does not hold the items it counts stops the
// plugin side, which says why, and the host fences; the transport sends
// nothing.
func TestRingPairPluginRefusesBadNotifications(t *testing.T) {
	pr := newPair(t)
	payload := encodeOutNote(nil, sdk.OutboundNotification{Peer: pr.peer, Message: []byte("cut short")})
	payload = payload[:len(payload)-3]
	_, err := pr.host.submit(context.Background(), "SendNotifications", kindSendNotes, kindSendNotesRes, 1, nil, payload)
	require.ErrorIs(t, err, sdk.ErrPluginShutdown)
	assert.Contains(t, err.Error(), "send-notifications call")
	assert.Contains(t, err.Error(), "notification of 9 bytes")
	assert.Equal(t, int32(1), pr.kills.Load(), "the host fenced")
	ns, err := pr.impl.Notifications(context.Background(), 0)
	require.NoError(t, err)
	assert.Empty(t, ns, "nothing was sent")
}

// countNotes counts the pump's notification drains of a fake.
type countNotes struct {
	*fake.Transport
	drains atomic.Int32
}

func (c *countNotes) Notifications(ctx context.Context, max int) ([]sdk.Notification, error) {
	c.drains.Add(1)
	return c.Transport.Notifications(ctx, max)
}

// TestRingPairWakeReasons: for a transport that says what its wake-ups
// were for (sdk.WakeReasoner), the pump drains notifications only when a
// notification may have come: completions alone cost no drain, and a
// notification still reaches the host without the host asking.
func TestRingPairWakeReasons(t *testing.T) {
	var cn *countNotes
	pr := newPairOf(t, func(tr sdk.Transport) sdk.Transport {
		cn = &countNotes{Transport: tr.(*fake.Transport)}
		return cn
	}, 10*time.Second)
	for range 20 {
		res := pr.post(t, 1)
		require.NoError(t, res[0].Err)
		id := res[0].ID
		require.Eventually(t, func() bool {
			pr.host.drain()
			pr.host.mu.Lock()
			defer pr.host.mu.Unlock()
			return pr.host.known[id].terminal
		}, 10*time.Second, 10*time.Microsecond)
		_, err := pr.host.submit(context.Background(), "Release", kindRelease, kindReleaseRes, 1, []sdk.HandleID{id}, encodeIDs(nil, []sdk.HandleID{id}))
		require.NoError(t, err)
	}
	assert.Zero(t, cn.drains.Load(), "completions alone made the pump drain notifications")

	errs, err := pr.impl.SendNotifications(context.Background(), []sdk.OutboundNotification{{Peer: pr.peer, Message: []byte("hi")}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	deadline := time.After(10 * time.Second)
	for {
		pr.host.drain()
		pr.host.mu.Lock()
		n := len(pr.host.notes)
		pr.host.mu.Unlock()
		if n > 0 {
			break
		}
		select {
		case <-pr.host.wake:
		case <-deadline:
			t.Fatal("the notification did not reach the host")
		}
	}
	assert.Positive(t, cn.drains.Load())
}

// TestRingPairPromptAsksNothing: when the transport is a Waker (prompt),
// an empty Notifications or Events answers from the rings without a
// drain call, and what the transport receives still arrives after a
// wake-up; without prompt, an empty Notifications asks the transport.
func TestRingPairPromptAsksNothing(t *testing.T) {
	var cn *countNotes
	pr := newPairOf(t, func(tr sdk.Transport) sdk.Transport {
		cn = &countNotes{Transport: tr.(*fake.Transport)}
		return cn
	}, 10*time.Second)
	p := &Plugin{grpc: pr.grpc}
	p.rings.Store(pr.host)
	ctx := context.Background()

	ns, err := p.Notifications(ctx, 0)
	require.NoError(t, err)
	assert.Empty(t, ns)
	assert.Equal(t, int32(1), cn.drains.Load(), "without prompt an empty queue asks the transport")

	pr.host.prompt = true
	calls := pr.host.nextCall
	for range 10 {
		ns, err := p.Notifications(ctx, 0)
		require.NoError(t, err)
		assert.Empty(t, ns)
		evs, err := pr.host.Events(ctx, 0)
		require.NoError(t, err)
		assert.Empty(t, evs)
	}
	assert.Equal(t, int32(1), cn.drains.Load(), "prompt: nothing asked")
	assert.Equal(t, calls, pr.host.nextCall, "prompt: no drain call submitted")

	errs, err := pr.impl.SendNotifications(ctx, []sdk.OutboundNotification{{Peer: pr.peer, Message: []byte("hi")}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-pr.host.wake:
		case <-deadline:
			t.Fatal("the notification did not arrive")
		}
		ns, err := p.Notifications(ctx, 0)
		require.NoError(t, err)
		if len(ns) > 0 {
			assert.Equal(t, []sdk.Notification{{From: "a", Message: []byte("hi")}}, ns)
			break
		}
	}
}

// TestRingPairWakeAfterPollLoop: while a caller Polls in a loop the reader
// naps, and the plugin does not wake it; once the caller stops polling and
// waits on Wake instead, a completion still reaches it, with nobody but
// the reader draining the ring. The fake pauses between the chunks of a
// transfer, so that the caller's Poll comes before the completion.
func TestRingPairWakeAfterPollLoop(t *testing.T) {
	pr := newPairWith(t, pairConfig{timeout: 10 * time.Second, params: map[string]string{"chunk": "1024", "chunk_delay": "1ms"}})
	p := &Plugin{grpc: pr.grpc}
	p.rings.Store(pr.host)
	ctx := context.Background()
	for range 5 {
		id := pr.post(t, 1)[0].ID
		sts, err := p.Poll(ctx, []sdk.HandleID{id})
		require.NoError(t, err)
		// Stop polling: from here only Wake tells.
		deadline := time.After(10 * time.Second)
		for !sts[0].State.Terminal() {
			select {
			case <-pr.host.wake:
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
