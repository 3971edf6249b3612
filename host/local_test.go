package host

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/sdk"
)

// localProc is a transport that answers Notifications locally (localCalls)
// and whose Post waits for the test. It counts the Notifications made each
// way and signals each one.
type localProc struct {
	stubProc
	posted  chan struct{} // Post signals here when it starts
	postGo  chan struct{} // each receive lets one Post return
	viaExec atomic.Int32
	local   atomic.Int32
	asked   chan string // "exec" or "local", per Notifications
}

func (l *localProc) Post(ctx context.Context, ps []sdk.PostSpec) ([]sdk.PostResult, error) {
	l.posted <- struct{}{}
	<-l.postGo
	out := make([]sdk.PostResult, len(ps))
	for i := range out {
		out[i].ID = sdk.HandleID(i + 1)
	}
	return out, nil
}

func (l *localProc) Notifications(ctx context.Context, max int) ([]sdk.Notification, error) {
	l.viaExec.Add(1)
	l.asked <- "exec"
	return nil, nil
}

func (l *localProc) NotificationsNow(int) ([]sdk.Notification, bool) {
	l.local.Add(1)
	l.asked <- "local"
	return nil, true
}

func (l *localProc) EventsNow(int) ([]sdk.Event, bool)         { return nil, false }
func (l *localProc) ReleaseNow([]sdk.HandleID) ([]error, bool) { return nil, false }

// A call the transport answers locally is made on the owner goroutine, but
// never ahead of Work at the executor: a round asked for (here by a
// wake-up) while a Post is out runs once that Post is reported, and then
// answers its queries locally; Work handed out after a Post, in the same
// batch or a later one, waits for it at the executor.
func TestLocalCallsNeverOvertakeTheExecutor(t *testing.T) {
	c, err := core.New(core.Config{})
	require.NoError(t, err)
	require.NoError(t, c.Attach(1, sdk.Description{Name: "stub", Capabilities: sdk.Capabilities{Notifications: true}}, false))
	lp := &localProc{stubProc: stubProc{exited: make(chan struct{})}, posted: make(chan struct{}), postGo: make(chan struct{}), asked: make(chan string, 8)}
	wake := make(chan struct{}) // unbuffered: a send returns once the owner took it
	h, cancel, ran := runOwner(c, lp, wake)
	ctx := context.Background()
	defer func() {
		cancel()
		require.NoError(t, <-ran)
	}()

	asked := func(want, what string) {
		t.Helper()
		select {
		case got := <-lp.asked:
			require.Equal(t, want, got, what)
		case <-time.After(10 * time.Second): // bounds a failure only
			t.Fatalf("no Notifications call: %s", what)
		}
	}
	// barrier returns once the owner handled everything sent before it.
	barrier := func() { require.NoError(t, h.do(ctx, func(context.Context) error { return nil })) }
	// settled waits until the executor's results are all reported (its
	// signal to the test comes before its result reaches the owner).
	settled := func() {
		require.Eventually(t, func() bool {
			q := uint64(1)
			require.NoError(t, h.do(ctx, func(context.Context) error { q = h.queued(); return nil }))
			return q == 0
		}, 10*time.Second, time.Millisecond)
	}
	// handOut gives the executor ws as core would (their results are
	// unknown to core, which ignores them).
	next := core.WorkID(1 << 40)
	handOut := func(kinds ...core.WorkKind) {
		var ws []core.Work
		for _, k := range kinds {
			w := core.Work{ID: next, Epoch: 1, Kind: k}
			if k == core.WorkPost {
				w.Posts = posts(0)
			}
			ws, next = append(ws, w), next+1
		}
		require.NoError(t, h.do(ctx, func(context.Context) error { h.absorb(core.Ready{Work: ws}); return nil }))
	}
	posted := func() {
		t.Helper()
		select {
		case <-lp.posted:
		case <-time.After(10 * time.Second):
			t.Fatal("the Post never reached the transport")
		}
	}

	wake <- struct{}{}
	asked("local", "with nothing at the executor, the round's Notifications is answered locally")
	barrier()
	for len(lp.asked) > 0 { // the round Run starts with, when it came after the wake-up's
		asked("local", "with nothing at the executor, the round's Notifications is answered locally")
	}
	require.Zero(t, lp.viaExec.Load())
	local := lp.local.Load()

	handOut(core.WorkPost)
	posted()
	wake <- struct{}{}
	barrier()
	assert.Equal(t, local, lp.local.Load(), "no round while the Post is out")
	lp.postGo <- struct{}{}
	asked("local", "the wake-up's round runs once the Post is reported, locally")
	local++

	handOut(core.WorkPost)
	posted()
	handOut(core.WorkNotifications)
	barrier()
	assert.Equal(t, local, lp.local.Load(), "Work handed out after a Post is out waits for it")
	lp.postGo <- struct{}{}
	asked("exec", "it is made at the executor, after the Post")

	settled()
	handOut(core.WorkPost, core.WorkNotifications)
	posted()
	barrier()
	assert.Equal(t, local, lp.local.Load(), "Work after a Post in one batch waits for it")
	lp.postGo <- struct{}{}
	asked("exec", "it is made at the executor, after the Post")
	assert.Equal(t, int32(2), lp.viaExec.Load())
}

// nowProc answers every local call with what the test set.
type nowProc struct {
	stubProc
	evs   []sdk.Event
	notes []sdk.Notification
	errs  []error
	ok    bool
	asked []sdk.HandleID // the ids ReleaseNow was given
}

func (n *nowProc) EventsNow(int) ([]sdk.Event, bool)               { return n.evs, n.ok }
func (n *nowProc) NotificationsNow(int) ([]sdk.Notification, bool) { return n.notes, n.ok }
func (n *nowProc) ReleaseNow(ids []sdk.HandleID) ([]error, bool) {
	n.asked = ids
	return n.errs, n.ok
}

// runLocal makes the call of each Work kind a transport can answer
// locally, hands its answer to the Work, and makes no other.
func TestRunLocalMakesTheWorksCall(t *testing.T) {
	np := &nowProc{evs: []sdk.Event{{Handle: 7, State: sdk.StateDone}}, notes: []sdk.Notification{{Message: []byte("m")}},
		errs: []error{nil, sdk.ErrNotFound}, ok: true}
	r, ok := runLocal(np, core.Work{ID: 1, Kind: core.WorkEvents})
	require.True(t, ok)
	assert.Equal(t, workResult{id: 1, res: core.Result{Events: np.evs}}, r)
	r, ok = runLocal(np, core.Work{ID: 2, Kind: core.WorkNotifications})
	require.True(t, ok)
	assert.Equal(t, workResult{id: 2, res: core.Result{Notifications: np.notes}}, r)
	r, ok = runLocal(np, core.Work{ID: 3, Kind: core.WorkRelease, Handles: []sdk.HandleID{4, 5}})
	require.True(t, ok)
	assert.Equal(t, workResult{id: 3, res: core.Result{Errs: np.errs}}, r)
	assert.Equal(t, []sdk.HandleID{4, 5}, np.asked)
	for _, k := range []core.WorkKind{core.WorkPost, core.WorkPoll, core.WorkCancel, core.WorkSendNotifications, core.WorkClose} {
		_, ok := runLocal(np, core.Work{Kind: k})
		assert.False(t, ok, "%v is never answered locally", k)
	}
	np.ok = false
	for _, k := range []core.WorkKind{core.WorkEvents, core.WorkNotifications, core.WorkRelease} {
		_, ok := runLocal(np, core.Work{Kind: k})
		assert.False(t, ok, "%v: the transport could not answer locally", k)
	}
	_, ok = runLocal(&stubProc{}, core.Work{Kind: core.WorkEvents})
	assert.False(t, ok, "a transport without local calls")
}
