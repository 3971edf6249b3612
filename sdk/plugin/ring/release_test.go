package ring

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// releases counts the transport's Release calls per handle, and fails
// every Release call as a whole while failing is set.
type releases struct {
	sdk.Transport
	mu      sync.Mutex
	calls   map[sdk.HandleID]int
	failing atomic.Bool
}

func (r *releases) Release(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	r.mu.Lock()
	for _, id := range ids {
		r.calls[id]++
	}
	r.mu.Unlock()
	if r.failing.Load() {
		return nil, sdk.Errorf(sdk.CodeBackend, "release refused by the test")
	}
	return r.Transport.Release(ctx, ids)
}

func (r *releases) of(id sdk.HandleID) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[id]
}

// releasePair is a pair (under release at terminal when releaseTerminal)
// whose transport counts its releases, with hostCalls over its host side
// whose every gRPC call fails.
func releasePair(t *testing.T, releaseTerminal bool) (*pair, *releases, hostCalls) {
	t.Helper()
	rel := &releases{calls: map[sdk.HandleID]int{}}
	pr := newPairWith(t, pairConfig{
		wrap:            func(tr sdk.Transport) sdk.Transport { rel.Transport = tr; return rel },
		timeout:         10 * time.Second,
		releaseTerminal: releaseTerminal,
	})
	p, _ := pr.calls()
	return pr, rel, p
}

// waitDone polls id through p until the rings report it DONE.
func waitDone(t *testing.T, p hostCalls, id sdk.HandleID) {
	t.Helper()
	require.Eventually(t, func() bool {
		sts, err := p.Poll(context.Background(), []sdk.HandleID{id})
		require.NoError(t, err)
		require.NoError(t, sts[0].Err)
		return sts[0].State == sdk.StateDone
	}, 10*time.Second, 10*time.Microsecond)
}

// TestReleaseAtTerminal: under release at terminal the plugin releases a
// handle before the host learns it is DONE, and the host's Release is
// answered from the record, without reaching the transport; a second
// Release gets the transport's own answer. Without it, the plugin
// releases nothing on its own.
func TestReleaseAtTerminal(t *testing.T) {
	ctx := context.Background()
	t.Run("on", func(t *testing.T) {
		pr, rel, p := releasePair(t, true)
		res, err := p.Post(ctx, []sdk.PostSpec{pr.spec(), pr.spec()})
		require.NoError(t, err)
		ids := []sdk.HandleID{res[0].ID, res[1].ID}
		for _, id := range ids {
			waitDone(t, p, id)
			assert.Equal(t, 1, rel.of(id), "handle %d released by the plugin once it was DONE, before the host saw DONE", id)
		}
		// To the host the handles are terminal and held: Cancel changes
		// nothing and is OK, without asking the transport (which no
		// longer knows them).
		errs, err := p.Cancel(ctx, ids)
		require.NoError(t, err)
		assert.Equal(t, []error{nil, nil}, errs)
		assert.Zero(t, p.rpc.(*noGRPC).cancels.Load(), "Cancel answered without gRPC")
		errs, err = p.Release(ctx, []sdk.HandleID{ids[0], ids[1], ids[1]})
		require.NoError(t, err)
		require.Len(t, errs, 3)
		assert.NoError(t, errs[0])
		assert.NoError(t, errs[1])
		assert.ErrorIs(t, errs[2], sdk.ErrNotFound, "a repeat in one call gets the transport's answer to a second release")
		assert.Equal(t, 1, rel.of(ids[0]), "the host's Release of handle %d was answered from the record", ids[0])
		assert.Equal(t, 2, rel.of(ids[1]), "only the repeat of handle %d reached the transport", ids[1])
		pr.host.mu.Lock()
		assert.NotContains(t, pr.host.known, ids[0], "a released handle is forgotten")
		pr.host.mu.Unlock()
		errs, err = p.Release(ctx, ids[:1])
		require.NoError(t, err)
		assert.ErrorIs(t, errs[0], sdk.ErrNotFound, "a second Release reaches the transport")
		assert.Equal(t, 2, rel.of(ids[0]))
		assert.Equal(t, int32(0), pr.kills.Load(), "no fence")
	})
	t.Run("off", func(t *testing.T) {
		pr, rel, p := releasePair(t, false)
		res, err := p.Post(ctx, []sdk.PostSpec{pr.spec()})
		require.NoError(t, err)
		waitDone(t, p, res[0].ID)
		assert.Zero(t, rel.of(res[0].ID), "nothing released before the host asked")
		_, err = p.Cancel(ctx, []sdk.HandleID{res[0].ID})
		require.Error(t, err, "Cancel goes to the transport")
		assert.Equal(t, int32(1), p.rpc.(*noGRPC).cancels.Load())
		errs, err := p.Release(ctx, []sdk.HandleID{res[0].ID})
		require.NoError(t, err)
		assert.NoError(t, errs[0])
		assert.Equal(t, 1, rel.of(res[0].ID))
	})
}

// TestReleaseAtTerminalFailureLeftToTheHost: a release that fails in the
// plugin leaves the handle to the host's Release, which reaches the
// transport; and a host Release whose part through the rings fails as a
// whole fails as a whole, keeping the record of the handle the plugin
// released, so that a retry is answered from it.
func TestReleaseAtTerminalFailureLeftToTheHost(t *testing.T) {
	ctx := context.Background()
	pr, rel, p := releasePair(t, true)
	res, err := p.Post(ctx, []sdk.PostSpec{pr.spec()})
	require.NoError(t, err)
	a := res[0].ID
	waitDone(t, p, a)
	require.Equal(t, 1, rel.of(a))

	rel.failing.Store(true)
	res, err = p.Post(ctx, []sdk.PostSpec{pr.spec()})
	require.NoError(t, err)
	b := res[0].ID
	waitDone(t, p, b)
	require.Equal(t, 1, rel.of(b), "the plugin tried to release b")

	_, err = p.Release(ctx, []sdk.HandleID{a, b})
	require.ErrorIs(t, err, sdk.ErrBackend, "the call through the rings failed as a whole")
	assert.Equal(t, 2, rel.of(b), "b's release reached the transport")
	assert.Equal(t, 1, rel.of(a), "a was never sent again")
	pr.host.mu.Lock()
	assert.True(t, pr.host.known[a].released, "a failed call changes nothing: a's record stays")
	pr.host.mu.Unlock()

	rel.failing.Store(false)
	errs, err := p.Release(ctx, []sdk.HandleID{a, b})
	require.NoError(t, err)
	assert.Equal(t, []error{nil, nil}, errs)
	assert.Equal(t, 1, rel.of(a), "a answered from its record")
	assert.Equal(t, 3, rel.of(b))
	assert.Equal(t, int32(0), pr.kills.Load(), "no fence")
}

// reusesIDs gives the second Post the first Post's handle id: a transport
// that reuses an id the host still holds.
type reusesIDs struct {
	sdk.Transport
	first sdk.HandleID
}

func (r *reusesIDs) Post(ctx context.Context, posts []sdk.PostSpec) ([]sdk.PostResult, error) {
	res, err := r.Transport.Post(ctx, posts)
	if err != nil || len(res) == 0 {
		return res, err
	}
	if r.first == 0 {
		r.first = res[0].ID
	} else {
		res[0].ID = r.first
	}
	return res, nil
}

// TestRingPairFencesAReusedID: a Post that returns the id of a handle the
// host has not released is fenced, with or without release at terminal:
// the record of the old handle would answer Poll for the new transfer.
func TestRingPairFencesAReusedID(t *testing.T) {
	for _, on := range []bool{false, true} {
		pr := newPairWith(t, pairConfig{
			wrap:            func(tr sdk.Transport) sdk.Transport { return &reusesIDs{Transport: tr} },
			timeout:         10 * time.Second,
			releaseTerminal: on,
		})
		first := pr.post(t, 1)
		require.NoError(t, first[0].Err)
		require.Eventually(t, func() bool {
			pr.host.drain()
			pr.host.mu.Lock()
			defer pr.host.mu.Unlock()
			return pr.host.known[first[0].ID].terminal
		}, 10*time.Second, 10*time.Microsecond)
		var w wire
		w = encodePostSpec(w, pr.spec())
		_, err := pr.host.submit(context.Background(), "Post", kindPost, kindPostResult, 1, nil, w)
		require.ErrorIs(t, err, sdk.ErrPluginShutdown)
		assert.Contains(t, err.Error(), "which the host has not released yet: ids must never be reused")
		assert.Equal(t, int32(1), pr.kills.Load(), "fenced once")
	}
}

// gatedRelease holds the pump inside its release at terminal: once the
// transport released the handles, the first such call says so on released
// and waits for proceed. The first Cancel that reaches the transport sends
// the transport's answer on cancelled.
type gatedRelease struct {
	sdk.Transport
	released  chan []sdk.HandleID
	proceed   chan struct{}
	cancelled chan []error
}

func (g *gatedRelease) Release(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	errs, err := g.Transport.Release(ctx, ids)
	select {
	case g.released <- ids:
		<-g.proceed
	default:
	}
	return errs, err
}

func (g *gatedRelease) Cancel(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	errs, err := g.Transport.Cancel(ctx, ids)
	select {
	case g.cancelled <- errs:
	default:
	}
	return errs, err
}

// serverCancel answers the host's gRPC Cancel as package plugin's gRPC
// server does, in process: the transport's answer, after the Server was
// told of it (Server.Canceled).
type serverCancel struct {
	noGRPC
	impl   sdk.Transport
	server *Server
}

func (c *serverCancel) Cancel(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	errs, err := c.impl.Cancel(ctx, ids)
	if err == nil {
		c.server.Canceled(errs)
	}
	return errs, err
}

// within waits for ch, failing the test past 10 s.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s", what)
		panic("unreachable")
	}
}

// TestCancelRacingReleaseAtTerminal: a Cancel that reaches the transport
// after the plugin released the handle at terminal, but before the host
// saw its state, is OK, as the Cancel of any terminal handle: the
// transport's NOT_FOUND reaches the host only once the state is in the
// completion ring, and the host answers from it.
func TestCancelRacingReleaseAtTerminal(t *testing.T) {
	ctx := context.Background()
	g := &gatedRelease{released: make(chan []sdk.HandleID, 1), proceed: make(chan struct{}), cancelled: make(chan []error, 1)}
	pr := newPairWith(t, pairConfig{
		wrap:            func(tr sdk.Transport) sdk.Transport { g.Transport = tr; return g },
		timeout:         10 * time.Second,
		releaseTerminal: true,
	})
	p := hostCalls{r: pr.host, rpc: &serverCancel{impl: g, server: pr.server}}
	res, err := p.Post(ctx, []sdk.PostSpec{pr.spec()})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	id := res[0].ID
	require.Equal(t, []sdk.HandleID{id}, within(t, g.released, "release at terminal"))

	type answer struct {
		errs []error
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		errs, err := p.Cancel(ctx, []sdk.HandleID{id})
		got <- answer{errs, err}
	}()
	// The transport no longer knows the handle; its state is not pushed.
	require.True(t, isNotFound(within(t, g.cancelled, "Cancel at the transport")[0]))
	close(g.proceed)
	a := within(t, got, "answer to Cancel")
	require.NoError(t, a.err)
	assert.NoError(t, a.errs[0], "a Cancel racing the release at terminal")
	waitDone(t, p, id)
}
