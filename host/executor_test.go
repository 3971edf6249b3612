package host

import (
	"context"
	"errors"
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
	h := &Host{cfg: &Config{Transport: TransportConfig{CallTimeout: time.Minute}}, log: hclog.NewNullLogger(), metrics: NewMetrics(),
		core: c, tp: sp, epoch: 1, exec: newExecutor(time.Minute), links: map[string]*link{}, reqs: map[core.RequestID]reqInfo{},
		cmds: make(chan command), handshakes: make(chan handshake), done: make(chan struct{})}
	h.bgCtx, h.bgCancel = context.WithCancel(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- h.Run(ctx) }()

	h.exec.submit(job{w: core.Work{ID: 99, Epoch: 1, Kind: core.WorkPoll, Handles: []sdk.HandleID{1}}, tp: sp})
	<-sp.entered // the executor is inside a transport call that will not return
	_, err = h.GetFinished(context.Background())
	require.NoError(t, err, "GetFinished answered while the call hangs")
	assert.Error(t, h.Free(context.Background(), 1, []uint32{0}), "Free answered (an error: no such pool)")

	close(sp.unblock)
	cancel()
	require.NoError(t, <-ran)
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
	h := &Host{cfg: &Config{Transport: TransportConfig{CallTimeout: time.Minute}}, log: hclog.NewNullLogger(), metrics: NewMetrics(),
		core: c, tp: np, epoch: 1, exec: newExecutor(time.Minute), links: map[string]*link{}, reqs: map[core.RequestID]reqInfo{},
		cmds: make(chan command), handshakes: make(chan handshake), done: make(chan struct{}), wake: wake}
	h.bgCtx, h.bgCancel = context.WithCancel(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- h.Run(ctx) }()
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
