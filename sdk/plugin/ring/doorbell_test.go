package ring

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDoorbellWakesASleeper: a side asleep on its doorbell wakes when the
// peer publishes and rings.
func TestDoorbellWakesASleeper(t *testing.T) {
	host, plug := testRings(t, smallLayout)
	c := newConsumer(plug.sub, "submission")
	p := newProducer(host.sub, "submission")
	woke := make(chan uint64)
	// sleeping is closed once the sleeper said it sleeps and found nothing:
	// from then on only the doorbell wakes it (a ring before its
	// FUTEX_WAIT moves the word, and the wait returns at once).
	sleeping := make(chan struct{})
	go func() {
		for first := true; ; first = false {
			v := plug.plugin.prepare(asleep)
			if n, _ := c.available(); n > 0 {
				plug.plugin.cancel()
				woke <- n
				return
			}
			if first {
				close(sleeping)
			}
			plug.plugin.wait(v, 0)
		}
	}()
	<-sleeping
	require.NoError(t, produce(p, entry{kind: kindRelease}, nil))
	host.plugin.ring()
	select {
	case n := <-woke:
		assert.Equal(t, uint64(1), n)
	case <-time.After(10 * time.Second):
		t.Fatal("the sleeper was not woken by the doorbell")
	}
}

// Of several rings before the owner runs again, only the first wakes it
// (and pays a FUTEX_WAKE): it clears the flag, and the owner looks at the
// rings once awake. Once the owner sleeps again, a ring wakes it again.
func TestDoorbellWakesOncePerSleep(t *testing.T) {
	host, plug := testRings(t, smallLayout)
	v := plug.plugin.prepare(asleep)
	assert.True(t, host.plugin.ring(), "the first ring wakes a sleeper")
	assert.False(t, host.plugin.ring(), "a second ring before the owner slept again")
	assert.Equal(t, v+1, plug.plugin.word.Load(), "the word moved once")
	plug.plugin.wait(v, 0) // returns at once: the word moved
	v = plug.plugin.prepare(asleep)
	assert.True(t, host.plugin.ring(), "the owner slept again")
	plug.plugin.wait(v, 0)
	assert.False(t, host.plugin.ring(), "an owner awake")
}

// Freed room wakes only an owner that waits for room; entries published
// wake both kinds of sleeper.
func TestDoorbellRoomFreedWakesOnlyAnOwnerAwaitingRoom(t *testing.T) {
	host, plug := testRings(t, smallLayout)
	v := plug.plugin.prepare(asleep)
	host.plugin.roomFreed()
	assert.Equal(t, uint32(asleep), plug.plugin.sleeping.Load(), "an owner asleep for entries stays asleep")
	assert.Equal(t, v, plug.plugin.word.Load(), "the word did not move")
	plug.plugin.cancel()

	v = plug.plugin.prepare(awaitingRoom)
	host.plugin.roomFreed()
	assert.Equal(t, uint32(0), plug.plugin.sleeping.Load(), "an owner awaiting room is woken")
	assert.Equal(t, v+1, plug.plugin.word.Load())
	plug.plugin.wait(v, 0)

	v = plug.plugin.prepare(awaitingRoom)
	assert.True(t, host.plugin.ring(), "entries wake an owner awaiting room too")
	plug.plugin.wait(v, 0)
}
