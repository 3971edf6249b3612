package core

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Seed 001's rule: other goroutines reach the Core only through its Inbox;
// the owner applies their inputs in its own Poll. Run with -race.
func TestInboxIsTheOnlyWayIn(t *testing.T) {
	r := newRig(t, rigOpts{})
	const peers = 8
	ids := make([]RequestID, peers)
	for i := range ids {
		spec, _ := r.readSpec(RequestID(fmt.Sprint("r", i)), fmt.Sprint("peer", i), 1)
		require.NoError(t, r.read(spec))
		ids[i] = spec.Request
	}
	var wg sync.WaitGroup
	for i := 0; i < peers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.c.Inbox().HandshakeFailed(fmt.Sprint("peer", i), fmt.Errorf("peer%d unreachable", i))
		}()
	}
	// The owner drains while the others push.
	r.until("every handshake failure applied", func(Ready) bool { return r.c.Stats().Waiting == 0 })
	wg.Wait()
	assert.ElementsMatch(t, ids, failedIDs(r.all))
}
