package ring

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// eventReleases is releases over a transport that is an EventSource.
type eventReleases struct{ releases }

func (e *eventReleases) Events(ctx context.Context, max int) ([]sdk.Event, error) {
	return e.Transport.(sdk.EventSource).Events(ctx, max)
}

// TestNowCallsAnswerFromTheRings: with prompt rings, EventsNow and
// NotificationsNow hand over what the completion ring brought without a
// call to the plugin, and ReleaseNow answers for handles the plugin
// released at terminal; each says it cannot (ok false, nothing taken)
// where the ordinary call would have to ask the plugin, and once the rings
// are broken.
func TestNowCallsAnswerFromTheRings(t *testing.T) {
	ctx := context.Background()
	rel := &eventReleases{releases{calls: map[sdk.HandleID]int{}}}
	pr := newPairWith(t, pairConfig{
		wrap:            func(tr sdk.Transport) sdk.Transport { rel.Transport = tr; return rel },
		timeout:         10 * time.Second,
		releaseTerminal: true,
	})
	p, _ := pr.calls()

	calls := pr.host.nextCall
	_, ok := p.EventsNow(0)
	assert.False(t, ok, "events without prompt rings ask the plugin")
	_, ok = p.NotificationsNow(0)
	assert.False(t, ok, "notifications without prompt rings ask the plugin")
	assert.Equal(t, calls, pr.host.nextCall, "nothing submitted")

	pr.host.prompt = true
	res, err := p.Post(ctx, []sdk.PostSpec{pr.spec(), pr.spec()})
	require.NoError(t, err)
	ids := []sdk.HandleID{res[0].ID, res[1].ID}
	calls = pr.host.nextCall
	var evs []sdk.Event
	require.Eventually(t, func() bool {
		got, ok := p.EventsNow(0)
		require.True(t, ok)
		evs = append(evs, got...)
		return len(evs) == 2
	}, 10*time.Second, 10*time.Microsecond)
	for i, ev := range evs {
		assert.Equal(t, ids[i], ev.Handle)
		assert.Equal(t, sdk.StateDone, ev.State)
	}
	ns, ok := p.NotificationsNow(0)
	assert.True(t, ok)
	assert.Empty(t, ns)
	assert.Equal(t, calls, pr.host.nextCall, "prompt: nothing submitted")

	_, ok = p.ReleaseNow([]sdk.HandleID{ids[0], ids[0]})
	assert.False(t, ok, "a repeat gets the transport's answer to a second release")
	_, ok = p.ReleaseNow([]sdk.HandleID{ids[0], 999})
	assert.False(t, ok, "a handle not released at terminal goes to the transport")
	errs, ok := p.ReleaseNow(ids)
	require.True(t, ok)
	assert.Equal(t, []error{nil, nil}, errs)
	for _, id := range ids {
		assert.Equal(t, 1, rel.of(id), "handle %d released once, by the plugin at terminal", id)
	}
	_, ok = p.ReleaseNow(ids[:1])
	assert.False(t, ok, "a released handle is forgotten: its next Release reaches the transport")
	calls = pr.host.nextCall

	pr.host.mu.Lock()
	pr.host.broken = errors.New("broken by the test")
	pr.host.mu.Unlock()
	_, ok = p.EventsNow(0)
	assert.False(t, ok, "broken rings: Events gives the error")
	_, ok = p.NotificationsNow(0)
	assert.False(t, ok, "broken rings: Notifications gives the error")
	pr.host.mu.Lock()
	pr.host.broken = nil
	pr.host.mu.Unlock()
	pr.exit() // the process is gone
	_, ok = p.EventsNow(0)
	assert.False(t, ok, "gone: Events gives the error")
	assert.Equal(t, calls, pr.host.nextCall, "nothing submitted")
}
