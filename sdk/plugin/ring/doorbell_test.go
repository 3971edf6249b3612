package ring

import (
	"sync/atomic"
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
	var asleep atomic.Bool
	go func() {
		for {
			v := plug.plugin.prepare()
			if n, _ := c.available(); n > 0 {
				plug.plugin.cancel()
				woke <- n
				return
			}
			asleep.Store(true)
			plug.plugin.wait(v, 0)
		}
	}()
	for !asleep.Load() {
		time.Sleep(time.Millisecond) // waits for the goroutine to go to sleep; not a synchronisation of the result
	}
	require.NoError(t, produce(p, entry{kind: kindRelease}, nil))
	host.plugin.ring()
	select {
	case n := <-woke:
		assert.Equal(t, uint64(1), n)
	case <-time.After(10 * time.Second):
		t.Fatal("the sleeper was not woken by the doorbell")
	}
}
