package host

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/sdk"
)

// stubProc is a transport process whose calls the test controls: every call
// records whether its context had a deadline; Poll blocks until its context
// ends (a wedged transport); Kill fails when killErr is set.
type stubProc struct {
	sdk.Transport // nil: any call not overridden panics
	deadlines     chan bool
	killErr       error
	killed        int
	exited        chan struct{}
	entered       chan struct{} // Poll signals here when it starts
	unblock       chan struct{} // Poll returns when this closes
}

func (s *stubProc) Cancel(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	_, ok := ctx.Deadline()
	s.deadlines <- ok
	return make([]error, len(ids)), nil
}

func (s *stubProc) Poll(ctx context.Context, ids []sdk.HandleID) ([]sdk.HandleStatus, error) {
	if s.entered != nil {
		s.entered <- struct{}{}
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.unblock:
		return nil, sdk.Errorf(sdk.CodeBackend, "stub: unblocked")
	}
}

func (s *stubProc) Close(context.Context) error { return nil }

func (s *stubProc) Kill() error             { s.killed++; return s.killErr }
func (s *stubProc) Stop()                   {}
func (s *stubProc) Exited() <-chan struct{} { return s.exited }
func (s *stubProc) Pid() int                { return 1 }

// Rule 13: every call the executor makes carries a deadline, Cancel
// included.
func TestExecutorGivesEveryCallADeadline(t *testing.T) {
	e := newExecutor(time.Minute)
	defer e.close()
	sp := &stubProc{deadlines: make(chan bool, 1)}
	e.submit(job{w: core.Work{ID: 1, Epoch: 1, Kind: core.WorkCancel, Handles: []sdk.HandleID{7}}, tp: sp})
	assert.True(t, <-sp.deadlines, "Cancel ran without a deadline")
	r := <-e.results
	assert.Equal(t, core.WorkID(1), r.id)
	require.NoError(t, r.err)
}

// A call that outlives the call timeout ends as sdk.CodeTimeout, so core
// counts it toward a wedged transport; and work of a gone process fails at
// once with CodePluginShutdown.
func TestExecutorReportsTimeoutsAndGoneProcesses(t *testing.T) {
	e := newExecutor(time.Millisecond)
	defer e.close()
	sp := &stubProc{}
	e.submit(job{w: core.Work{ID: 1, Epoch: 1, Kind: core.WorkPoll, Handles: []sdk.HandleID{7}}, tp: sp},
		job{w: core.Work{ID: 2, Epoch: 1, Kind: core.WorkRelease, Handles: []sdk.HandleID{7}}})
	r := <-e.results
	assert.Equal(t, sdk.CodeTimeout, sdk.CodeOf(r.err), "%v", r.err)
	r = <-e.results
	assert.Equal(t, core.WorkID(2), r.id)
	assert.Equal(t, sdk.CodePluginShutdown, sdk.CodeOf(r.err))
}

// A fence whose kill fails is no fence: the process may still move bytes,
// so core is not told the epoch is fenced, the process is kept, and the
// next round asks again.
func TestFenceWhoseKillFailsFencesNothing(t *testing.T) {
	c, err := core.New(core.Config{})
	require.NoError(t, err)
	require.NoError(t, c.Attach(1, sdk.Description{Name: "stub"}, false))
	sp := &stubProc{killErr: errors.New("kill: operation not permitted"), exited: make(chan struct{})}
	h := &Host{cfg: &Config{}, log: hclog.NewNullLogger(), metrics: NewMetrics(), core: c, tp: sp, epoch: 1, exec: newExecutor(time.Second)}
	defer h.exec.close()
	h.fence("test")
	assert.Equal(t, 1, sp.killed)
	assert.Equal(t, core.Epoch(1), c.Epoch(), "core was told a process that may live is fenced")
	assert.Same(t, sp, h.tp.(*stubProc))
	assert.Zero(t, h.fences)
}

// The engine API answers from the owner's state while the executor is stuck
// in a transport call: transport work never runs on the owner goroutine.
func TestEngineAnswersWhileATransportCallHangs(t *testing.T) {
	c, err := core.New(core.Config{})
	require.NoError(t, err)
	require.NoError(t, c.Attach(1, sdk.Description{Name: "stub"}, false))
	sp := &stubProc{exited: make(chan struct{}), entered: make(chan struct{}, 1), unblock: make(chan struct{})}
	h, cancel, ran := runOwner(c, sp, nil)

	h.exec.submit(job{w: core.Work{ID: 99, Epoch: 1, Kind: core.WorkPoll, Handles: []sdk.HandleID{1}}, tp: sp})
	<-sp.entered // the executor is inside a transport call that will not return
	_, err = h.GetFinished(context.Background())
	require.NoError(t, err, "GetFinished answered while the call hangs")
	assert.Error(t, h.Free(context.Background(), 1, []uint32{0}), "Free answered (an error: no such pool)")

	close(sp.unblock)
	cancel()
	require.NoError(t, <-ran)
}

// runOwner runs the owner loop (Run) of a host over core c, attached as
// epoch 1 of transport tp with wake-up channel wake (nil: none), until
// cancel; ran then gives Run's error.
func runOwner(c *core.Core, tp process, wake <-chan struct{}) (h *Host, cancel context.CancelFunc, ran <-chan error) {
	h = &Host{cfg: &Config{Transport: TransportConfig{CallTimeout: time.Minute}}, log: hclog.NewNullLogger(), metrics: NewMetrics(),
		core: c, tp: tp, epoch: 1, exec: newExecutor(time.Minute), links: map[string]*link{}, failing: map[string]*link{}, reqs: map[core.RequestID]reqInfo{},
		cmds: make(chan command), handshakes: make(chan handshake), done: make(chan struct{}), wake: wake}
	h.bgCtx, h.bgCancel = context.WithCancel(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan error, 1)
	go func() { out <- h.Run(ctx) }()
	return h, cancel, out
}

// noteProc is a transport with notifications and a wake-up channel whose
// Notifications calls the test releases one by one.
type noteProc struct {
	stubProc
	calls   chan struct{} // Notifications signals here when it starts
	release chan struct{} // each receive lets one call return, empty
}

func (n *noteProc) Notifications(ctx context.Context, max int) ([]sdk.Notification, error) {
	n.calls <- struct{}{}
	select {
	case <-n.release:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// A wake-up that comes while the previous round's Notifications call is
// still out (it may have drained before the notification arrived) is not
// lost: once that call is reported the host asks again, instead of
// leaving the notification until the next deadline.
func TestWakeWhileARoundIsOutIsNotLost(t *testing.T) {
	c, err := core.New(core.Config{})
	require.NoError(t, err)
	require.NoError(t, c.Attach(1, sdk.Description{Name: "stub", Capabilities: sdk.Capabilities{Notifications: true}}, false))
	np := &noteProc{stubProc: stubProc{exited: make(chan struct{})}, calls: make(chan struct{}), release: make(chan struct{})}
	wake := make(chan struct{}) // unbuffered: a send returns once the owner took it
	_, cancel, ran := runOwner(c, np, wake)
	defer func() {
		cancel()
		close(np.release) // let any call still out return
		require.NoError(t, <-ran)
	}()

	wait := func(what string) {
		t.Helper()
		select {
		case <-np.calls:
		case <-time.After(10 * time.Second): // bounds a failure only
			t.Fatalf("no Notifications call: %s", what)
		}
	}
	wake <- struct{}{}
	wait("the first wake-up's round")
	wake <- struct{}{} // a notification arrives while that call is out
	np.release <- struct{}{}
	wait("the host never asked again after a wake-up it took while its round was out")
	np.release <- struct{}{}
}

// batchProc records the Post and Release calls it gets: each call's items.
// Its first call waits for hold to close, so that the test queues work
// behind it; callErr, when set, fails every later call whole.
type batchProc struct {
	stubProc
	entered chan struct{}
	hold    chan struct{}
	calls   []string
	callErr error
}

func (b *batchProc) wait() {
	if b.entered != nil {
		b.entered <- struct{}{}
		b.entered = nil
		<-b.hold
	}
}

func (b *batchProc) Post(ctx context.Context, posts []sdk.PostSpec) ([]sdk.PostResult, error) {
	b.wait()
	b.calls = append(b.calls, fmt.Sprintf("Post %d", len(posts)))
	if b.callErr != nil {
		return nil, b.callErr
	}
	out := make([]sdk.PostResult, len(posts))
	for i, p := range posts {
		out[i].ID = sdk.HandleID(p.LocalIndices[0]) // the test names each post's handle
	}
	return out, nil
}

func (b *batchProc) Release(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	b.wait()
	b.calls = append(b.calls, fmt.Sprintf("Release %d", len(ids)))
	out := make([]error, len(ids))
	for i, id := range ids {
		out[i] = fmt.Errorf("release %d", id)
	}
	return out, nil
}

func posts(ids ...uint32) []sdk.PostSpec {
	out := make([]sdk.PostSpec, len(ids))
	for i, id := range ids {
		out[i] = sdk.PostSpec{Op: sdk.OpRead, LocalIndices: []uint32{id}}
	}
	return out
}

// Posts queued behind a call are made as one call, and so are Releases,
// within the items a call may carry, in the order handed out; each Work
// gets its own items' results.
func TestExecutorMakesQueuedPostsOneCall(t *testing.T) {
	e := newExecutor(time.Minute)
	defer e.close()
	bp := &batchProc{entered: make(chan struct{}), hold: make(chan struct{})}
	other := &batchProc{}
	mk := func(id core.WorkID, kind core.WorkKind, tp sdk.Transport, items ...uint32) job {
		w := core.Work{ID: id, Epoch: 1, Kind: kind}
		if kind == core.WorkPost {
			w.Posts = posts(items...)
		} else {
			for _, i := range items {
				w.Handles = append(w.Handles, sdk.HandleID(i))
			}
		}
		return job{w: w, tp: tp, most: 4}
	}
	e.submit(mk(1, core.WorkPost, bp, 10))
	<-bp.entered // the first call is out: what follows queues
	e.submit(
		mk(2, core.WorkPost, bp, 20, 21), mk(3, core.WorkPost, bp, 30), mk(4, core.WorkPost, bp, 40), // 4 items: one call
		mk(5, core.WorkPost, bp, 50), // a fifth would not fit
		mk(6, core.WorkRelease, bp, 60), mk(7, core.WorkRelease, bp, 70, 71),
		mk(8, core.WorkPost, other, 80), // another transport's
		mk(9, core.WorkPost, bp, 90),
	)
	close(bp.hold)
	want := map[core.WorkID][]string{
		1: {"10"}, 2: {"20", "21"}, 3: {"30"}, 4: {"40"}, 5: {"50"},
		6: {"release 60"}, 7: {"release 70", "release 71"}, 8: {"80"}, 9: {"90"},
	}
	for id := core.WorkID(1); id <= 9; id++ {
		r := <-e.results
		require.Equal(t, id, r.id, "results come in the order the Work was handed out")
		require.NoError(t, r.err)
		var got []string
		for _, p := range r.res.Posts {
			got = append(got, fmt.Sprint(p.ID))
		}
		for _, err := range r.res.Errs {
			got = append(got, err.Error())
		}
		assert.Equal(t, want[id], got, "work %d", id)
	}
	assert.Equal(t, []string{"Post 1", "Post 4", "Post 1", "Release 3", "Post 1"}, bp.calls)
	assert.Equal(t, []string{"Post 1"}, other.calls)
}

// A call-level error of a call made for several Works reaches each of them.
func TestExecutorCallErrorReachesEveryWorkOfTheCall(t *testing.T) {
	e := newExecutor(time.Minute)
	defer e.close()
	bp := &batchProc{entered: make(chan struct{}), hold: make(chan struct{}), callErr: sdk.Errorf(sdk.CodeBackend, "stub: down")}
	e.submit(job{w: core.Work{ID: 1, Epoch: 1, Kind: core.WorkRelease, Handles: []sdk.HandleID{1}}, tp: bp, most: 8})
	<-bp.entered
	e.submit(job{w: core.Work{ID: 2, Epoch: 1, Kind: core.WorkPost, Posts: posts(2)}, tp: bp, most: 8},
		job{w: core.Work{ID: 3, Epoch: 1, Kind: core.WorkPost, Posts: posts(3, 4)}, tp: bp, most: 8})
	close(bp.hold)
	r := <-e.results
	require.NoError(t, r.err)
	for id := core.WorkID(2); id <= 3; id++ {
		r := <-e.results
		assert.Equal(t, id, r.id)
		assert.Equal(t, sdk.CodeBackend, sdk.CodeOf(r.err), "work %d: %v", id, r.err)
		assert.Empty(t, r.res.Posts)
	}
	assert.Equal(t, []string{"Release 1", "Post 3"}, bp.calls)
}
