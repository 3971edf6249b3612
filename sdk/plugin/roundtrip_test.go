package plugin_test

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/plugins/fake"
	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
)

// These tests drive every call of the contract through a real fake plugin
// process and check each result and each code, per item, as the contract
// states them.

const (
	waitFor = 10 * time.Second
	tick    = 2 * time.Millisecond
	unknown = sdk.HandleID(1 << 60)
)

// codes are the codes of errs, in order, so that a batch's outcome reads as
// one value.
func codes(errs []error) []sdk.Code {
	out := make([]sdk.Code, len(errs))
	for i, err := range errs {
		out[i] = sdk.CodeOf(err)
	}
	return out
}

// rig is an open fake plugin agent with one region file registered as two
// regions, a loopback peer (the agent itself), and a local and a remote
// dlist of one 4 KiB descriptor each: the local one at the start of the
// file, the remote one at 64 KiB.
type rig struct {
	p            *plugin.Plugin
	file         string
	r1, r2       sdk.RegionID
	peer         sdk.PeerID
	local, rmote sdk.DlistID
}

const descBytes = 4096

func newRig(t testing.TB, faults string) *rig {
	t.Helper()
	return openRig(t, launch(t, fakeBin, plugin.LaunchOptions{}), faults)
}

// openRig opens the fake agent p serves and sets up the rig.
func openRig(t testing.TB, p *plugin.Plugin, faults string) *rig {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	params := map[string]string{"dir": dir}
	if faults != "" {
		params["fault"] = faults
	}
	require.NoError(t, p.Open(ctx, sdk.OpenRequest{Agent: "a", Params: params}))
	requirePath(t, p)
	file, err := fake.NewRegionFile(dir, 128<<10)
	require.NoError(t, err)

	regs, err := p.RegisterMemory(ctx, []sdk.Region{
		{Path: file, Offset: 0, Length: 64 << 10, Kind: sdk.MemoryHost},
		{Path: file, Offset: 64 << 10, Length: 64 << 10, Kind: sdk.MemoryHost},
	})
	require.NoError(t, err)
	require.Equal(t, []sdk.Code{sdk.CodeOK, sdk.CodeOK}, codes([]error{regs[0].Err, regs[1].Err}))
	md, err := p.LocalMetadata(ctx)
	require.NoError(t, err)
	peers, err := p.LoadPeers(ctx, []sdk.PeerSpec{{Name: "a", Metadata: md}})
	require.NoError(t, err)
	require.NoError(t, peers[0].Err)
	lists, err := p.PrepareDescriptors(ctx, []sdk.DlistSpec{
		{Descriptors: []sdk.Descriptor{{Region: regs[0].ID, Length: descBytes}}},
		{Peer: peers[0].ID, Descriptors: []sdk.Descriptor{{Region: regs[1].ID, Length: descBytes}}},
	})
	require.NoError(t, err)
	require.NoError(t, lists[0].Err)
	require.NoError(t, lists[1].Err)
	return &rig{p: p, file: file, r1: regs[0].ID, r2: regs[1].ID, peer: peers[0].ID, local: lists[0].ID, rmote: lists[1].ID}
}

// write is one WRITE of the local descriptor into the remote one.
func (r *rig) write(note string) sdk.PostSpec {
	return sdk.PostSpec{Op: sdk.OpWrite, Local: r.local, LocalIndices: []uint32{0}, Remote: r.rmote, RemoteIndices: []uint32{0}, Notification: []byte(note)}
}

// waitState polls h until it reaches a terminal state and returns its
// status.
func (r *rig) waitTerminal(t *testing.T, h sdk.HandleID) sdk.HandleStatus {
	t.Helper()
	var last sdk.HandleStatus
	require.Eventually(t, func() bool {
		sts, err := r.p.Poll(context.Background(), []sdk.HandleID{h})
		require.NoError(t, err)
		last = sts[0]
		return last.Err == nil && last.State.Terminal()
	}, waitFor, tick, "handle %d never turned terminal", h)
	return last
}

func TestContractRoundTrip(t *testing.T) { bothPaths(t, testContractRoundTrip) }

func testContractRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := launch(t, fakeBin, plugin.LaunchOptions{})

	// Open: a call-level error keeps its code; the agent stays unopened.
	err := p.Open(ctx, sdk.OpenRequest{Agent: "a", Params: map[string]string{"bogus": "1"}})
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	assert.Contains(t, sdk.MessageOf(err), "bogus")
	_, err = p.RegisterMemory(ctx, []sdk.Region{{}})
	require.ErrorIs(t, err, sdk.ErrInvalidArgument, "calls before Open are refused as a whole")
	// The second post stalls forever; the first fails Release once.
	require.NoError(t, p.Open(ctx, sdk.OpenRequest{Agent: "a", Params: map[string]string{
		"dir": dir, "fault": "stall,post=2;release-fail,post=1",
	}}))
	requirePath(t, p)

	file, err := fake.NewRegionFile(dir, 128<<10)
	require.NoError(t, err)
	pattern := bytes.Repeat([]byte("custody!"), descBytes/8)
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(pattern, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	// RegisterMemory: per-item codes and ids.
	regs, err := p.RegisterMemory(ctx, []sdk.Region{
		{Path: file, Offset: 0, Length: 64 << 10, Kind: sdk.MemoryHost},
		{Path: file, Offset: 64 << 10, Length: 64 << 10},
		{Path: file, Length: 0},
		{Path: file, Length: 1, Kind: "gpu"},
	})
	require.NoError(t, err)
	require.Len(t, regs, 4)
	assert.Equal(t, []sdk.Code{sdk.CodeOK, sdk.CodeOK, sdk.CodeInvalidArgument, sdk.CodeInvalidArgument},
		codes([]error{regs[0].Err, regs[1].Err, regs[2].Err, regs[3].Err}))
	assert.NotZero(t, regs[0].ID)
	assert.NotEqual(t, regs[0].ID, regs[1].ID)
	assert.Zero(t, regs[2].ID)
	assert.Contains(t, sdk.MessageOf(regs[3].Err), `"gpu"`)
	r1, r2 := regs[0].ID, regs[1].ID

	// LocalMetadata and LoadPeers (the agent loads itself as its peer).
	md, err := p.LocalMetadata(ctx)
	require.NoError(t, err)
	assert.NotEmpty(t, md)
	peers, err := p.LoadPeers(ctx, []sdk.PeerSpec{{Name: "a", Metadata: md}, {Name: "x", Metadata: []byte("garbage")}})
	require.NoError(t, err)
	assert.Equal(t, []sdk.Code{sdk.CodeOK, sdk.CodeInvalidArgument}, codes([]error{peers[0].Err, peers[1].Err}))
	peer := peers[0].ID

	// PrepareDescriptors: local, remote, and a remote one of an unknown peer.
	lists, err := p.PrepareDescriptors(ctx, []sdk.DlistSpec{
		{Descriptors: []sdk.Descriptor{{Region: r1, Length: descBytes}}},
		{Peer: peer, Descriptors: []sdk.Descriptor{{Region: r2, Length: descBytes}}},
		{Peer: 1 << 60, Descriptors: []sdk.Descriptor{{Region: r2, Length: descBytes}}},
	})
	require.NoError(t, err)
	assert.Equal(t, []sdk.Code{sdk.CodeOK, sdk.CodeOK, sdk.CodeInvalidArgument}, codes([]error{lists[0].Err, lists[1].Err, lists[2].Err}))
	rg := &rig{p: p, file: file, r1: r1, r2: r2, peer: peer, local: lists[0].ID, rmote: lists[1].ID}

	// Post: the first moves, the second stalls, the third is malformed.
	bad := rg.write("")
	bad.Op = 0
	posts, err := p.Post(ctx, []sdk.PostSpec{rg.write("first done"), rg.write(""), bad})
	require.NoError(t, err)
	assert.Equal(t, []sdk.Code{sdk.CodeOK, sdk.CodeOK, sdk.CodeInvalidArgument}, codes([]error{posts[0].Err, posts[1].Err, posts[2].Err}))
	done, running := posts[0].ID, posts[1].ID

	// Poll: DONE, IN_PROGRESS, and NOT_FOUND for an unknown handle.
	assert.Equal(t, sdk.HandleStatus{State: sdk.StateDone}, rg.waitTerminal(t, done))
	sts, err := p.Poll(ctx, []sdk.HandleID{done, running, unknown})
	require.NoError(t, err)
	require.Len(t, sts, 3)
	assert.Equal(t, sdk.HandleStatus{State: sdk.StateDone}, sts[0])
	assert.Equal(t, sdk.HandleStatus{State: sdk.StateInProgress}, sts[1])
	assert.ErrorIs(t, sts[2].Err, sdk.ErrNotFound)
	assert.Zero(t, sts[2].State, "a failed poll has no state")
	copied := make([]byte, descBytes)
	f, err = os.Open(file)
	require.NoError(t, err)
	_, err = f.ReadAt(copied, 64<<10)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	assert.Equal(t, pattern, copied, "DONE means the bytes are in place")

	// Release, one item at a time: BUSY, NOT_FOUND, BACKEND (injected), each
	// changing nothing.
	for _, tc := range []struct {
		id   sdk.HandleID
		want sdk.Code
	}{{running, sdk.CodeBusy}, {unknown, sdk.CodeNotFound}, {done, sdk.CodeBackend}} {
		errs, err := p.Release(ctx, []sdk.HandleID{tc.id})
		require.NoError(t, err)
		assert.Equal(t, []sdk.Code{tc.want}, codes(errs), "Release of handle %d", tc.id)
	}
	// Release, batched: [terminal, running, unknown] -> [OK, BUSY, NOT_FOUND].
	errs, err := p.Release(ctx, []sdk.HandleID{done, running, unknown})
	require.NoError(t, err)
	assert.Equal(t, []sdk.Code{sdk.CodeOK, sdk.CodeBusy, sdk.CodeNotFound}, codes(errs))
	assert.ErrorIs(t, errs[1], sdk.ErrBusy)
	assert.ErrorIs(t, errs[2], sdk.ErrNotFound)
	errs, err = p.Release(ctx, []sdk.HandleID{done})
	require.NoError(t, err)
	assert.ErrorIs(t, errs[0], sdk.ErrNotFound, "a released handle is gone")

	// Everything a live handle uses is refused, per item and per call.
	errs, err = p.ReleaseDescriptors(ctx, []sdk.DlistID{rg.local, 1 << 60})
	require.NoError(t, err)
	assert.Equal(t, []sdk.Code{sdk.CodeBusy, sdk.CodeNotFound}, codes(errs))
	errs, err = p.UnloadPeers(ctx, []sdk.PeerID{peer})
	require.NoError(t, err)
	assert.Equal(t, []sdk.Code{sdk.CodeBusy}, codes(errs))
	errs, err = p.DeregisterMemory(ctx, []sdk.RegionID{r1, 1 << 60})
	require.NoError(t, err)
	assert.Equal(t, []sdk.Code{sdk.CodeBusy, sdk.CodeNotFound}, codes(errs))
	err = p.Close(ctx)
	assert.ErrorIs(t, err, sdk.ErrBusy, "Close with resources held")
	assert.Contains(t, sdk.MessageOf(err), "release them first")
	res, err := p.Resources(ctx)
	require.NoError(t, err)
	assert.Equal(t, sdk.Resources{Regions: 2, Peers: 1, Dlists: 2, Handles: 1, InFlight: 1}, res)

	// Cancel frees nothing; the handle turns CANCELED and is released after.
	errs, err = p.Cancel(ctx, []sdk.HandleID{running, unknown})
	require.NoError(t, err)
	assert.Equal(t, []sdk.Code{sdk.CodeOK, sdk.CodeNotFound}, codes(errs))
	res, err = p.Resources(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), res.Handles, "Cancel frees nothing")
	st := rg.waitTerminal(t, running)
	assert.Equal(t, sdk.StateCanceled, st.State)
	errs, err = p.Release(ctx, []sdk.HandleID{running})
	require.NoError(t, err)
	assert.Equal(t, []sdk.Code{sdk.CodeOK}, codes(errs))

	// Events: each handle's turn to terminal, once, in order.
	evs, err := p.Events(ctx, 0)
	require.NoError(t, err)
	var terminal []sdk.Event
	for _, e := range evs {
		if e.State.Terminal() {
			terminal = append(terminal, e)
		}
	}
	require.Len(t, terminal, 2)
	assert.Equal(t, sdk.Event{Handle: done, State: sdk.StateDone}, terminal[0])
	assert.Equal(t, running, terminal[1].Handle)
	assert.Equal(t, sdk.StateCanceled, terminal[1].State)
	evs, err = p.Events(ctx, 0)
	require.NoError(t, err)
	assert.Empty(t, evs, "events are drained once")

	// Notifications: the post's, then one sent directly; an unknown peer is
	// refused.
	errs, err = p.SendNotifications(ctx, []sdk.OutboundNotification{{Peer: peer, Message: []byte("hello")}, {Peer: 1 << 60, Message: []byte("x")}})
	require.NoError(t, err)
	assert.Equal(t, []sdk.Code{sdk.CodeOK, sdk.CodeInvalidArgument}, codes(errs))
	var got []sdk.Notification
	require.Eventually(t, func() bool {
		ns, err := p.Notifications(ctx, 1)
		require.NoError(t, err)
		got = append(got, ns...)
		return len(got) >= 2
	}, waitFor, tick)
	assert.Equal(t, []sdk.Notification{{From: "a", Message: []byte("first done")}, {From: "a", Message: []byte("hello")}}, got)

	// Teardown in reverse, then Close.
	errs, err = p.ReleaseDescriptors(ctx, []sdk.DlistID{rg.local, rg.rmote})
	require.NoError(t, err)
	assert.Equal(t, []sdk.Code{sdk.CodeOK, sdk.CodeOK}, codes(errs))
	errs, err = p.UnloadPeers(ctx, []sdk.PeerID{peer, peer})
	require.NoError(t, err)
	assert.Equal(t, []sdk.Code{sdk.CodeOK, sdk.CodeNotFound}, codes(errs))
	errs, err = p.DeregisterMemory(ctx, []sdk.RegionID{r1, r2})
	require.NoError(t, err)
	assert.Equal(t, []sdk.Code{sdk.CodeOK, sdk.CodeOK}, codes(errs))
	res, err = p.Resources(ctx)
	require.NoError(t, err)
	assert.True(t, res.Zero(), "nothing leaked: %+v", res)
	require.NoError(t, p.Close(ctx))
	err = p.Open(ctx, sdk.OpenRequest{Agent: "a"})
	assert.ErrorIs(t, err, sdk.ErrInvalidArgument, "an agent opens once")
}

// TestReleaseOfRunningHandleIsBusy: Release of an IN_PROGRESS handle is BUSY
// and the handle stays pollable; Cancel frees nothing.
func TestReleaseOfRunningHandleIsBusy(t *testing.T) { bothPaths(t, testReleaseOfRunningHandleIsBusy) }

func testReleaseOfRunningHandleIsBusy(t *testing.T) {
	ctx := context.Background()
	rg := newRig(t, "stall")
	posts, err := rg.p.Post(ctx, []sdk.PostSpec{rg.write("")})
	require.NoError(t, err)
	require.NoError(t, posts[0].Err)
	h := posts[0].ID

	for range 3 {
		errs, err := rg.p.Release(ctx, []sdk.HandleID{h})
		require.NoError(t, err)
		require.ErrorIs(t, errs[0], sdk.ErrBusy)
		sts, err := rg.p.Poll(ctx, []sdk.HandleID{h})
		require.NoError(t, err)
		require.Equal(t, sdk.HandleStatus{State: sdk.StateInProgress}, sts[0], "the handle stays valid")
	}
	before, err := rg.p.Resources(ctx)
	require.NoError(t, err)
	errs, err := rg.p.Cancel(ctx, []sdk.HandleID{h})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	after, err := rg.p.Resources(ctx)
	require.NoError(t, err)
	assert.Equal(t, before.Handles, after.Handles, "Cancel frees nothing")
	assert.Equal(t, uint64(1), after.Handles)
	assert.Equal(t, sdk.StateCanceled, rg.waitTerminal(t, h).State)
	errs, err = rg.p.Release(ctx, []sdk.HandleID{h})
	require.NoError(t, err)
	require.NoError(t, errs[0])
}

// TestFailedReasonCrosses: a FAILED handle's reason keeps its code.
func TestFailedReasonCrosses(t *testing.T) { bothPaths(t, testFailedReasonCrosses) }

func testFailedReasonCrosses(t *testing.T) {
	ctx := context.Background()
	rg := newRig(t, "disconnect,post=1;fail,post=2,code=BACKEND")
	posts, err := rg.p.Post(ctx, []sdk.PostSpec{rg.write(""), rg.write("")})
	require.NoError(t, err)
	st := rg.waitTerminal(t, posts[0].ID)
	assert.Equal(t, sdk.StateFailed, st.State)
	assert.ErrorIs(t, st.Reason, sdk.ErrRemoteDisconnect)
	st = rg.waitTerminal(t, posts[1].ID)
	assert.Equal(t, sdk.StateFailed, st.State)
	assert.ErrorIs(t, st.Reason, sdk.ErrBackend)
}
