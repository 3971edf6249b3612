package fake

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// gatedPair is a pair whose initiator's DMA engine takes a step only when
// the test lets it, so a test can act between two chunks.
type gatedPair struct {
	*pair
	*gate
}

// gate holds an agent's DMA engine before each step until the test lets it
// through.
type gate struct {
	ch     chan struct{} // one send per step; closed: run freely
	ready  chan struct{} // the engine waits at the gate
	parked bool          // the engine's ready was taken, it waits on ch
	once   sync.Once
}

// newGate returns a gate to install as an agent's stepHook before Open.
func newGate() *gate { return &gate{ch: make(chan struct{}), ready: make(chan struct{})} }

// hook is the agent's stepHook.
func (g *gate) hook() {
	select {
	case g.ready <- struct{}{}:
	case <-g.ch: // closed: run freely
		return
	}
	<-g.ch
}

// newGatedPair builds a pair of size bytes whose agent a copies chunk bytes
// per step and runs one step per send on gate. The gate opens for good at
// the end of the test. setup runs on a before Open.
func newGatedPair(t *testing.T, size, chunk int, aParams map[string]string, setup ...func(*Transport)) *gatedPair {
	t.Helper()
	g := &gatedPair{gate: newGate()}
	if aParams == nil {
		aParams = map[string]string{}
	}
	aParams["chunk"] = strconv.Itoa(chunk)
	aParams["dir"] = t.TempDir()
	aParams["peer_dirs"] = os.TempDir() // the test's region files too
	a := New()
	a.stepHook = g.hook
	for _, f := range setup {
		f(a)
	}
	require.NoError(t, a.Open(ctx, sdk.OpenRequest{Agent: "a", Params: aParams}))
	var bParams map[string]string
	if f, ok := aParams["fence"]; ok {
		bParams = map[string]string{"fence": f} // the owner's fence decides who copies into its memory
	}
	b := open(t, "b", bParams)
	p := &pair{a: a, b: b, size: size}
	p.aPath, p.bPath = regionFile(t, size, 1), regionFile(t, size, 2)
	p.aRegion = register(t, a, sdk.Region{Path: p.aPath, Length: uint64(size)})
	p.bRegion = register(t, b, sdk.Region{Path: p.bPath, Length: uint64(size)})
	p.peer = loadPeer(t, a, b)
	p.local = prepare(t, a, 0, sdk.Descriptor{Region: p.aRegion, Length: uint64(size)})
	p.remote = prepare(t, a, p.peer, sdk.Descriptor{Region: p.bRegion, Length: uint64(size)})
	t.Cleanup(func() {
		g.open()
		p.teardown(t)
		res, err := a.Resources(ctx)
		if err == nil && !res.Zero() {
			t.Errorf("agent a still holds %+v", res)
		}
		_ = a.Close(ctx)
	})
	g.pair = p
	return g
}

// steps lets the engine take n steps and returns once the last is over.
func (g *gate) steps(n int) {
	for i := 0; i < n; i++ {
		if !g.parked {
			<-g.ready
		}
		g.parked = false
		g.ch <- struct{}{}
	}
	<-g.ready
	g.parked = true
}

// open lets the engine run freely from now on.
func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// TestLeaseOwnerDeregisters: once the owner deregisters the target region,
// the next chunk is not copied and the transfer ends REMOTE_DISCONNECT.
func TestLeaseOwnerDeregisters(t *testing.T) {
	g := newGatedPair(t, 64<<10, 4096, nil)
	before := readFile(t, g.bPath)
	h := postOne(t, g.a, g.whole(sdk.OpWrite, []byte("never")))
	g.steps(2) // two chunks land
	errs, err := g.b.DeregisterMemory(ctx, []sdk.RegionID{g.bRegion})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	g.open()
	st := terminal(t, g.a, h)
	require.Equal(t, sdk.StateFailed, st.State)
	require.ErrorIs(t, st.Reason, sdk.ErrRemoteDisconnect)
	after := readFile(t, g.bPath)
	require.False(t, bytes.Equal(after, readFile(t, g.aPath)), "the transfer stopped before the end")
	require.True(t, bytes.Equal(after[:2*4096], readFile(t, g.aPath)[:2*4096]), "the chunks before landed")
	require.True(t, bytes.Equal(after[2*4096:], before[2*4096:]), "no chunk after the lease ended was written")
	notes, err := g.b.Notifications(ctx, 0)
	require.NoError(t, err)
	require.Empty(t, notes, "a failed transfer sends no notification")
	release(t, g.a, h)
}

// TestLeaseOwnerDies: when the owner's lease fd closes, as when its process
// dies, transfers into its memory end REMOTE_DISCONNECT, stalled ones too,
// and the peer can no longer be loaded.
func TestLeaseOwnerDies(t *testing.T) {
	for _, stalled := range []bool{false, true} {
		name := "running"
		params := map[string]string{}
		if stalled {
			name, params["fault"] = "stalled", "stall"
		}
		t.Run(name, func(t *testing.T) {
			g := newGatedPair(t, 64<<10, 4096, params)
			h := postOne(t, g.a, g.whole(sdk.OpRead, nil))
			g.steps(2)
			killLeases(g.b)
			g.open()
			st := terminal(t, g.a, h)
			require.Equal(t, sdk.StateFailed, st.State)
			require.ErrorIs(t, st.Reason, sdk.ErrRemoteDisconnect)
			release(t, g.a, h)

			md, err := g.b.LocalMetadata(ctx)
			require.NoError(t, err)
			res, err := g.a.LoadPeers(ctx, []sdk.PeerSpec{{Name: "b", Metadata: md}})
			require.NoError(t, err)
			require.ErrorIs(t, res[0].Err, sdk.ErrRemoteDisconnect)
		})
	}
}

// TestFenceInitiated: with fence=initiated the lease is not checked, so a
// transfer into memory whose owner deregistered keeps writing to the end.
func TestFenceInitiated(t *testing.T) {
	g := newGatedPair(t, 64<<10, 4096, map[string]string{"fence": "initiated"})
	h := postOne(t, g.a, g.whole(sdk.OpWrite, nil))
	g.steps(2)
	killLeases(g.b)
	errs, err := g.b.DeregisterMemory(ctx, []sdk.RegionID{g.bRegion})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	g.open()
	require.Equal(t, sdk.StateDone, terminal(t, g.a, h).State)
	require.Equal(t, readFile(t, g.aPath), readFile(t, g.bPath), "every byte landed")
	release(t, g.a, h)
}

// TestCancelStops: Cancel stops the copy between chunks; no byte after the
// chunk in progress lands, and the handle reports CANCELED.
func TestCancelStops(t *testing.T) {
	g := newGatedPair(t, 64<<10, 4096, nil)
	before := readFile(t, g.bPath)
	h := postOne(t, g.a, g.whole(sdk.OpWrite, []byte("never")))
	g.steps(3) // three chunks land
	errs, err := g.a.Cancel(ctx, []sdk.HandleID{h})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.Equal(t, sdk.StateInProgress, poll(t, g.a, h).State, "Cancel is asynchronous")
	g.open()
	st := terminal(t, g.a, h)
	require.Equal(t, sdk.StateCanceled, st.State)
	require.ErrorIs(t, st.Reason, sdk.ErrCanceled)
	after := readFile(t, g.bPath)
	src := readFile(t, g.aPath)
	require.True(t, bytes.Equal(after[:3*4096], src[:3*4096]), "the chunks before Cancel landed")
	require.True(t, bytes.Equal(after[3*4096:], before[3*4096:]), "no byte after them moved")
	// Cancel of a terminal handle changes nothing.
	errs, err = g.a.Cancel(ctx, []sdk.HandleID{h})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.Equal(t, sdk.StateCanceled, poll(t, g.a, h).State)
	release(t, g.a, h)
	notes, err := g.b.Notifications(ctx, 0)
	require.NoError(t, err)
	require.Empty(t, notes)
}

// killLeases drops every lease a holds without deregistering, as the
// kernel does when a's process dies.
func killLeases(a *Transport) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.book.Regions() {
		r.Value.lease.close()
	}
}

// TestFenceIncomingNothingAfterDeath: under fence=incoming no byte moves
// into or out of an agent's memory once it died, not even the chunk that
// passed every check just before the death: the owner's process is the one
// that copies it, and a dead owner copies nothing. The owner dies here in
// the one place a window could be, between a chunk's checks and its bytes
// moving; its memory (WRITE) or the initiator's (READ) must not change from
// then on, and the transfer must fail, not end DONE on bytes read from
// memory the dead owner's host may already reuse. Both ways to the owner
// are held to it: the direct call to an owner in this process, and the
// socket that agents in two processes use.
func TestFenceIncomingNothingAfterDeath(t *testing.T) {
	for _, socket := range []bool{false, true} {
		for _, op := range []sdk.Op{sdk.OpWrite, sdk.OpRead} {
			name := op.String() + "/in-process"
			if socket {
				name = op.String() + "/socket"
			}
			t.Run(name, func(t *testing.T) { fenceIncomingNothingAfterDeath(t, op, socket) })
		}
	}
}

func fenceIncomingNothingAfterDeath(t *testing.T, op sdk.Op, socket bool) {
	viaSocket = socket
	t.Cleanup(func() { viaSocket = false })
	var g *gatedPair
	var moves atomic.Int32
	var snap []byte
	g = newGatedPair(t, 64<<10, 4096, nil, func(a *Transport) {
		a.moveHook = func() {
			if moves.Add(1) != 3 {
				return
			}
			g.b.Kill() // two chunks landed; the third passed its checks
			if op == sdk.OpWrite {
				snap = readFile(t, g.bPath)
			} else {
				snap = readFile(t, g.aPath)
			}
		}
	})
	h := postOne(t, g.a, g.whole(op, nil))
	g.open()
	st := terminal(t, g.a, h)
	require.GreaterOrEqual(t, moves.Load(), int32(3), "the transfer reached its third chunk")
	require.Equal(t, sdk.StateFailed, st.State, "a transfer whose peer died midway cannot be DONE")
	require.ErrorIs(t, st.Reason, sdk.ErrRemoteDisconnect)
	after := readFile(t, g.bPath)
	if op == sdk.OpRead {
		after = readFile(t, g.aPath)
	}
	require.True(t, bytes.Equal(snap, after), "bytes moved after the owner died: the chunk checked before the death landed after it")
	src := readFile(t, g.aPath)
	if op == sdk.OpRead {
		src = readFile(t, g.bPath)
	}
	dst := after
	require.True(t, bytes.Equal(dst[:2*4096], src[:2*4096]), "the two chunks before the death landed")
	release(t, g.a, h)
}
