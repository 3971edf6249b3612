package ring

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// A caller spins for its result only when its call found the pump awake,
// or when it polls in a loop: a call that had to wake the pump waits, and
// the reader hands it its answer. The transport holds the first Post, so
// that the pump stays awake in it while a second caller submits.
func TestACallerSpinsOnlyWhenThePumpWasAwake(t *testing.T) {
	let := make(chan struct{})
	slow := &slowPost{let: let}
	pr := newPairOf(t, func(tr sdk.Transport) sdk.Transport { slow.Transport = tr; return slow }, time.Hour)
	pr.host.waitSpin = time.Hour // a caller that spins does so until its answer comes
	var w wire
	w = encodePostSpec(w, pr.spec())
	type result struct {
		c   *pendingCall
		err error
	}
	post := func(res chan<- result) {
		c, err := pr.host.submit(context.Background(), "Post", kindPost, kindPostResult, 1, nil, w)
		res <- result{c, err}
	}

	// The fake is a Waker: with nothing in flight its pump sleeps until
	// the host or the transport wakes it.
	require.Eventually(t, func() bool { return pr.host.m.plugin.sleeping.Load() == 1 }, 10*time.Second, time.Millisecond, "the pump went to sleep")
	first := make(chan result, 1)
	go post(first)
	require.Eventually(t, func() bool { return slow.calls.Load() == 1 }, 10*time.Second, time.Millisecond, "the first Post reached the transport")
	// The pump is awake now, held in the first Post.
	second := make(chan result, 1)
	go post(second)
	require.Eventually(t, func() bool { return pr.host.spinning.Load() > 0 }, 10*time.Second, time.Millisecond, "the second caller spins")
	close(let)

	for i, res := range []chan result{first, second} {
		select {
		case r := <-res:
			require.NoError(t, r.err)
			assert.Equal(t, i == 1, r.c.spun, "call %d spun for its result (only the second found the pump awake)", i+1)
		case <-time.After(10 * time.Second):
			t.Fatal("a Post got no answer")
		}
	}

	// A caller that polls in a loop (its last Poll is recent; here it
	// stays so) spins even when its call woke the pump.
	require.Eventually(t, func() bool { return pr.host.m.plugin.sleeping.Load() == 1 }, 10*time.Second, time.Millisecond, "the pump went to sleep again")
	pr.host.polled.Store(clock() + int64(time.Hour))
	defer pr.host.polled.Store(0)
	third := make(chan result, 1)
	post(third)
	r := <-third
	require.NoError(t, r.err)
	assert.True(t, r.c.spun, "a caller polling in a loop spun for its result")
}
