package core

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What the owner queues in the Inbox changes nothing until the next Poll,
// which applies all of it, in push order.
func TestInboxIsTheOnlyWayIn(t *testing.T) {
	r := newRig(t, rigOpts{})
	const peers = 8
	ids := make([]RequestID, peers)
	for i := range ids {
		spec, _ := r.readSpec(RequestID(fmt.Sprint("r", i)), fmt.Sprint("peer", i), 1)
		require.NoError(t, r.read(spec))
		ids[i] = spec.Request
	}
	for i := 0; i < peers; i++ {
		r.c.Inbox().HandshakeFailed(fmt.Sprint("peer", i), fmt.Errorf("peer%d unreachable", i))
	}
	require.Equal(t, peers, r.c.Stats().Waiting, "an Inbox input took effect before a Poll")
	r.until("every handshake failure applied", func(Ready) bool { return r.c.Stats().Waiting == 0 })
	assert.ElementsMatch(t, ids, failedIDs(r.all))
}
