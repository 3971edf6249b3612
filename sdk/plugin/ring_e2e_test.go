package plugin_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
)

// ringMapping returns the ring file's line in /proc/pid/maps, or "".
func ringMapping(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "custody-rings-") {
			return l
		}
	}
	return ""
}

// TestRingsAttachAtOpen: Open negotiates the rings; both processes map the
// file, and its name is gone once they have.
func TestRingsAttachAtOpen(t *testing.T) {
	rg := newRig(t, "")
	require.True(t, rg.p.Rings())
	line := ringMapping(t, rg.p.Pid())
	require.NotEmpty(t, line, "the plugin maps the ring file")
	assert.True(t, strings.HasSuffix(line, "(deleted)"), "unlinked once both sides mapped it: %s", line)
	fields := strings.Fields(line)
	path := fields[len(fields)-2]
	_, err := os.Stat(filepath.Dir(path))
	assert.True(t, os.IsNotExist(err), "the private directory %s is gone", filepath.Dir(path))
	assert.NotEmpty(t, ringMapping(t, os.Getpid()), "the host maps it")
}

// TestRingsFallBack: rings turned off on either side leave every call on
// gRPC, silently, and the contract works as before.
func TestRingsFallBack(t *testing.T) {
	check := func(t *testing.T, opts plugin.LaunchOptions) {
		p := launch(t, fakeBin, opts)
		require.NoError(t, p.Open(context.Background(), sdk.OpenRequest{Agent: "a", Params: map[string]string{"dir": t.TempDir()}}))
		assert.False(t, p.Rings())
		assert.Empty(t, ringMapping(t, p.Pid()), "nothing mapped")
		_, err := p.Poll(context.Background(), []sdk.HandleID{unknown})
		require.NoError(t, err)
	}
	t.Run("host", func(t *testing.T) { check(t, plugin.LaunchOptions{DisableRings: true}) })
	t.Run("plugin", func(t *testing.T) {
		t.Setenv(plugin.RingsEnv, "off")
		check(t, plugin.LaunchOptions{})
	})
}

// TestRingsGarbageFences: a completion ring that breaks the protocol gets
// the transport killed (SIGKILL, as Kill does); the call that found it and
// every later one end PLUGIN_SHUTDOWN, and the host does not crash.
func TestRingsGarbageFences(t *testing.T) {
	rg := newRig(t, "")
	require.True(t, plugin.CorruptCompletions(rg.p))
	_, err := rg.p.Poll(context.Background(), []sdk.HandleID{1})
	require.ErrorIs(t, err, sdk.ErrPluginShutdown)
	assert.Contains(t, err.Error(), "broke the protocol")
	assert.Contains(t, err.Error(), "producer tail")
	requireExited(t, rg.p)
	requireSignaled(t, rg.p)
	requireAllShutdown(t, rg.p)
}

// TestRingsWake: a completion wakes Wake's channel.
func TestRingsWake(t *testing.T) {
	rg := newRig(t, "")
	wake := rg.p.Wake()
	res, err := rg.p.Post(context.Background(), []sdk.PostSpec{rg.write("")})
	require.NoError(t, err)
	deadline := time.After(waitFor)
	for {
		select {
		case <-wake:
		case <-deadline:
			t.Fatal("the handle never turned DONE after wake-ups")
		}
		sts, err := rg.p.Poll(context.Background(), []sdk.HandleID{res[0].ID})
		require.NoError(t, err)
		if sts[0].State == sdk.StateDone {
			return
		}
	}
}

// TestRingsWakeOnNotification: with nothing in flight the plugin's pump
// sleeps until its transport, a Waker, wakes it; a notification that
// reaches the transport then reaches the host and wakes Wake's channel.
// The host looks only after a wake-up, so a notification that wakes nobody
// fails the test at the deadline.
func TestRingsWakeOnNotification(t *testing.T) {
	rg := newRig(t, "")
	require.True(t, rg.p.Rings())
	wake := rg.p.Wake()
	select {
	case <-wake:
	default:
	}
	errs, err := rg.p.SendNotifications(context.Background(), []sdk.OutboundNotification{{Peer: rg.peer, Message: []byte("while idle")}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	deadline := time.After(waitFor)
	var got []sdk.Notification
	for len(got) == 0 {
		select {
		case <-wake:
		case <-deadline:
			t.Fatal("no wake-up brought the notification")
		}
		ns, err := rg.p.Notifications(context.Background(), 0)
		require.NoError(t, err)
		got = append(got, ns...)
	}
	assert.Equal(t, []sdk.Notification{{From: "a", Message: []byte("while idle")}}, got)
}

// TestRingsPollWhenNoEvents: for a transport that is no EventSource the
// plugin side polls the handles posted, so completions still come through
// the rings; Events stays unsupported.
func TestRingsPollWhenNoEvents(t *testing.T) {
	t.Setenv(helperEnv, "noevents")
	p := launch(t, helperBin, plugin.LaunchOptions{})
	rg := openRig(t, p, "")
	require.True(t, p.Rings())
	require.False(t, p.HasEvents())
	for range 20 {
		res, err := p.Post(context.Background(), []sdk.PostSpec{rg.write("")})
		require.NoError(t, err)
		require.NoError(t, res[0].Err)
		assert.Equal(t, sdk.StateDone, rg.waitTerminal(t, res[0].ID).State)
		errs, err := p.Release(context.Background(), []sdk.HandleID{res[0].ID})
		require.NoError(t, err)
		require.NoError(t, errs[0])
	}
	_, err := p.Events(context.Background(), 0)
	assert.ErrorIs(t, err, sdk.ErrUnsupported)
}

// TestRingsLargePostGoesOverGRPC: a Post too large for the submission ring
// travels over gRPC, with the transport's own answers, and its handles are
// followed all the same.
func TestRingsLargePostGoesOverGRPC(t *testing.T) {
	rg := newRig(t, "")
	huge := rg.write("")
	huge.Notification = make([]byte, 3<<20) // past half the arena, and the fake's limit
	res, err := rg.p.Post(context.Background(), []sdk.PostSpec{rg.write(""), huge})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	require.ErrorIs(t, res[1].Err, sdk.ErrInvalidArgument, "the fake refuses a notification past its limit")
	assert.Contains(t, sdk.MessageOf(res[1].Err), "notification")
	assert.Equal(t, sdk.StateDone, rg.waitTerminal(t, res[0].ID).State)
	errs, err := rg.p.Release(context.Background(), []sdk.HandleID{res[0].ID})
	require.NoError(t, err)
	require.NoError(t, errs[0])
}

// TestRingsReleaseAtTerminal: launched with ReleaseTerminal, the transport
// process has released a handle by the time the host sees it DONE, and the
// host's Release of it answers OK. Without the option, or when the
// process's own Release fails (the fake's release-fail fault), the handle
// stays live until the host's Release.
func TestRingsReleaseAtTerminal(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		opts   plugin.LaunchOptions
		faults string
		live   uint64 // handles live once the host sees DONE
	}{
		{name: "on", opts: plugin.LaunchOptions{ReleaseTerminal: true}},
		{name: "off", live: 1},
		{name: "failed in the process", opts: plugin.LaunchOptions{ReleaseTerminal: true}, faults: "release-fail,post=1", live: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rg := openRig(t, launch(t, fakeBin, tc.opts), tc.faults)
			require.True(t, rg.p.Rings())
			handles := func() uint64 {
				r, err := rg.p.Resources(ctx)
				require.NoError(t, err)
				return r.Handles
			}
			res, err := rg.p.Post(ctx, []sdk.PostSpec{rg.write("")})
			require.NoError(t, err)
			require.NoError(t, res[0].Err)
			assert.Equal(t, sdk.StateDone, rg.waitTerminal(t, res[0].ID).State)
			assert.Equal(t, tc.live, handles(), "handles live in the process when the host sees DONE")
			errs, err := rg.p.Release(ctx, []sdk.HandleID{res[0].ID})
			require.NoError(t, err)
			require.NoError(t, errs[0])
			assert.Zero(t, handles(), "nothing live after the host's Release")
		})
	}
}
