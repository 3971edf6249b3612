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
	s := openSrig(t, Config{}, nil)
	const peers = 8
	ids := make([]RequestID, peers)
	for i := range ids {
		ids[i] = RequestID(fmt.Sprint("r", i))
		s.read(ids[i], fmt.Sprint("peer", i), 1)
	}
	for i := 0; i < peers; i++ {
		s.c.Inbox().HandshakeFailed(fmt.Sprint("peer", i), fmt.Errorf("peer%d unreachable", i))
	}
	require.Equal(t, peers, s.c.Stats().Waiting, "an Inbox input took effect before a Poll")
	s.poll()
	require.Zero(t, s.c.Stats().Waiting, "every handshake failure applied")
	assert.ElementsMatch(t, ids, failedIDs(s.all))
}
