package plugin_test

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
)

// Once the plugin process is gone, every pending and every later call must
// return ErrPluginShutdown: the process was the fence. The call timeout is
// long in these tests, so a call that waited for its deadline instead of
// noticing the exit would end TIMEOUT and fail them.
const longCallTimeout = 5 * time.Minute

// allCalls makes every call of the contract, Events included, and returns
// each one's error by name.
func allCalls(ctx context.Context, p *plugin.Plugin) map[string]error {
	one := []sdk.HandleID{1}
	out := map[string]error{}
	_, out["Describe"] = p.Describe(ctx)
	out["Open"] = p.Open(ctx, sdk.OpenRequest{Agent: "a"})
	out["Close"] = p.Close(ctx)
	_, out["RegisterMemory"] = p.RegisterMemory(ctx, []sdk.Region{{}})
	_, out["DeregisterMemory"] = p.DeregisterMemory(ctx, []sdk.RegionID{1})
	_, out["LocalMetadata"] = p.LocalMetadata(ctx)
	_, out["LoadPeers"] = p.LoadPeers(ctx, []sdk.PeerSpec{{}})
	_, out["UnloadPeers"] = p.UnloadPeers(ctx, []sdk.PeerID{1})
	_, out["PrepareDescriptors"] = p.PrepareDescriptors(ctx, []sdk.DlistSpec{{}})
	_, out["ReleaseDescriptors"] = p.ReleaseDescriptors(ctx, []sdk.DlistID{1})
	_, out["Post"] = p.Post(ctx, []sdk.PostSpec{{}})
	_, out["Poll"] = p.Poll(ctx, one)
	_, out["Cancel"] = p.Cancel(ctx, one)
	_, out["Release"] = p.Release(ctx, one)
	_, out["SendNotifications"] = p.SendNotifications(ctx, []sdk.OutboundNotification{{}})
	_, out["Notifications"] = p.Notifications(ctx, 0)
	_, out["Resources"] = p.Resources(ctx)
	_, out["Events"] = p.Events(ctx, 0)
	return out
}

// requireExited waits (bounded) for the process to be gone.
func requireExited(t *testing.T, p *plugin.Plugin) {
	t.Helper()
	select {
	case <-p.Exited():
	case <-time.After(waitFor):
		t.Fatalf("plugin pid %d: Exited not closed %s after its process was killed", p.Pid(), waitFor)
	}
}

// requireSignaled checks that the process ended by SIGKILL: killed at once,
// not shut down gracefully.
func requireSignaled(t *testing.T, p *plugin.Plugin) {
	t.Helper()
	st := p.ExitState()
	require.NotNil(t, st)
	ws, ok := st.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	assert.True(t, ws.Signaled(), "ended by a signal: %v", st)
	assert.Equal(t, syscall.SIGKILL, ws.Signal(), "%v", st)
}

func requireAllShutdown(t *testing.T, p *plugin.Plugin) {
	t.Helper()
	for call, err := range allCalls(context.Background(), p) {
		assert.ErrorIs(t, err, sdk.ErrPluginShutdown, call)
		var x *plugin.ExitError
		if assert.ErrorAs(t, err, &x, call) {
			assert.Equal(t, call, x.Method)
			assert.NotNil(t, x.State, "%s: how the process ended", call)
		}
	}
}

// pendingPoll launches the blocking helper plugin and starts a Poll that
// blocks inside it; the Poll's error arrives on the channel.
func pendingPoll(t *testing.T) (*plugin.Plugin, <-chan error) {
	t.Helper()
	t.Setenv(helperEnv, "blocking")
	p := launch(t, helperBin, plugin.LaunchOptions{CallTimeout: longCallTimeout})
	pending := make(chan error, 1)
	go func() {
		_, err := p.Poll(context.Background(), []sdk.HandleID{1})
		pending <- err
	}()
	require.Eventually(t, func() bool {
		r, err := p.Resources(context.Background())
		require.NoError(t, err)
		return r.InFlight == 1
	}, waitFor, tick, "the Poll never reached the plugin")
	return p, pending
}

// TestKillUnderPendingCall: a call blocked inside the plugin when the
// process is killed with SIGKILL from outside returns ErrPluginShutdown.
func TestKillUnderPendingCall(t *testing.T) {
	p, pending := pendingPoll(t)

	require.NoError(t, syscall.Kill(p.Pid(), syscall.SIGKILL))
	select {
	case err := <-pending:
		assert.ErrorIs(t, err, sdk.ErrPluginShutdown)
		assert.Contains(t, sdk.MessageOf(err), "signal: killed", "the error says how the process ended")
	case <-time.After(waitFor):
		t.Fatal("the pending Poll did not return after its plugin was killed")
	}
	requireExited(t, p)
	requireSignaled(t, p)
	requireAllShutdown(t, p)
}

// TestKillUnderConcurrentCalls: callers hammering a real fake plugin when it
// is killed each see ErrPluginShutdown as their first error, and so does
// every call after.
func TestKillUnderConcurrentCalls(t *testing.T) { bothPaths(t, testKillUnderConcurrentCalls) }

func testKillUnderConcurrentCalls(t *testing.T) {
	rg := newRig(t, "stall")
	p := rg.p
	ctx := context.Background()
	posts, err := p.Post(ctx, []sdk.PostSpec{rg.write("")})
	require.NoError(t, err)
	h := posts[0].ID

	const callers = 4
	var started, finished sync.WaitGroup
	started.Add(callers)
	firstErr := make([]error, callers)
	for i := range callers {
		finished.Go(func() {
			for n := 0; ; n++ {
				var err error
				if i%2 == 0 {
					_, err = p.Poll(ctx, []sdk.HandleID{h})
				} else {
					_, err = p.Release(ctx, []sdk.HandleID{h})
				}
				if n == 0 {
					started.Done()
				}
				if err != nil {
					firstErr[i] = err
					return
				}
			}
		})
	}
	started.Wait()
	require.NoError(t, syscall.Kill(p.Pid(), syscall.SIGKILL))
	finished.Wait()
	for i, err := range firstErr {
		assert.ErrorIs(t, err, sdk.ErrPluginShutdown, "caller %d", i)
	}
	requireExited(t, p)
	requireSignaled(t, p)
	requireAllShutdown(t, p)
}

// TestKillIsTheFence: Plugin.Kill ends the process at once, with a transfer
// still running, and leaves every later call ErrPluginShutdown.
func TestKillIsTheFence(t *testing.T) { bothPaths(t, testKillIsTheFence) }

func testKillIsTheFence(t *testing.T) {
	rg := newRig(t, "stall")
	posts, err := rg.p.Post(context.Background(), []sdk.PostSpec{rg.write("")})
	require.NoError(t, err)
	require.NoError(t, posts[0].Err)

	require.Nil(t, rg.p.ExitState(), "the process runs")
	require.NoError(t, rg.p.Kill())
	select {
	case <-rg.p.Exited():
	default:
		t.Fatal("Exited not closed after Kill returned")
	}
	requireSignaled(t, rg.p)
	requireAllShutdown(t, rg.p)
	require.NoError(t, rg.p.Kill(), "Kill twice")
	err = syscall.Kill(rg.p.Pid(), 0)
	assert.ErrorIs(t, err, syscall.ESRCH, "the process is reaped")
}

// TestCrashDuringCall: the plugin exits by itself in the middle of a call
// (the fake's crash fault); the call returns ErrPluginShutdown.
func TestCrashDuringCall(t *testing.T) { bothPaths(t, testCrashDuringCall) }

func testCrashDuringCall(t *testing.T) {
	rg := newRig(t, "crash,at=post")
	_, err := rg.p.Post(context.Background(), []sdk.PostSpec{rg.write("")})
	assert.ErrorIs(t, err, sdk.ErrPluginShutdown)
	requireExited(t, rg.p)
	assert.Equal(t, 3, rg.p.ExitState().ExitCode(), "the fake's crash exit code")
	// The call that found the process gone says how it ended.
	var x *plugin.ExitError
	require.ErrorAs(t, err, &x)
	require.NotNil(t, x.State)
	assert.Equal(t, 3, x.State.ExitCode())
	assert.Contains(t, err.Error(), "exit status 3")
	requireAllShutdown(t, rg.p)
}

// TestStopUnderPendingCall: a graceful Stop under a pending call ends that
// call with ErrPluginShutdown too.
func TestStopUnderPendingCall(t *testing.T) {
	p, pending := pendingPoll(t)

	p.Stop()
	select {
	case err := <-pending:
		assert.ErrorIs(t, err, sdk.ErrPluginShutdown)
	case <-time.After(waitFor):
		t.Fatal("the pending Poll did not return after its plugin was stopped")
	}
	requireExited(t, p)
	requireAllShutdown(t, p)
}
