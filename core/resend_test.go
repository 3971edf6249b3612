package core

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// readNotify reads one block from rank 0 of peer p with NotifyProducer and
// returns the handle of its transfer.
func (s *srig) readNotify(id RequestID) sdk.HandleID {
	s.t.Helper()
	b, err := s.c.Alloc(s.pool, 1)
	require.NoError(s.t, err)
	require.NoError(s.t, s.c.Read(s.now, ReadSpec{Request: id, Token: tok(id), Peer: "p", NotifyProducer: true,
		Parts: []Part{{Pool: s.pool, Local: b, Rank: 0, Remote: []uint32{0}}}}))
	s.settle()
	hs := s.d.live()
	return hs[len(hs)-1]
}

// finish makes h DONE and runs a round: the read finishes and its consumed
// notification is sent.
func (s *srig) finish(id RequestID, h sdk.HandleID) Ready {
	s.t.Helper()
	s.d.set(h, sdk.StateDone, nil)
	rd := s.poll()
	require.Contains(s.t, rd.FinishedReceiving, id)
	return rd
}

// callsSince are the double's calls from index from on, without the epoch.
func (d *double) callsSince(from int) []string {
	var out []string
	for _, c := range d.calls[from:] {
		out = append(out, c[3:])
	}
	return out
}

// Rule 15: when the first notification to a rank fails, the rank is loaded
// again from its metadata before the next notification, which goes to the
// new peer id; the old id stays loaded for the dlist and the handles that
// use it, and both are released when the peer is removed.
func TestFirstNotificationFailureReloadsMetadata(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(d *double)
	}{
		{"item", func(d *double) {
			d.failItem(WorkSendNotifications, 0, sdk.Errorf(sdk.CodeRemoteDisconnect, "double: never arrived"), 1)
		}},
		{"whole", func(d *double) {
			d.failWhole(WorkSendNotifications, sdk.Errorf(sdk.CodeTimeout, "double: timed out"), 1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSrig(t, Config{}, nil)
			s.connect(peerSpec("p", 1))
			old := s.c.peers["p"].ranks[0].id
			require.NotZero(t, old)

			tc.fail(s.d)
			rd := s.finish("a", s.readNotify("a"))
			require.Contains(t, alertKinds(rd), "consumed_notification_failed")
			require.Empty(t, s.d.sent, "the first notification failed")

			// A transfer on the rank's dlist (naming the old id) runs
			// while the rank is reloaded.
			hc := s.readNotify("c")
			from := len(s.d.calls)
			s.finish("b", s.readNotify("b"))
			calls := s.d.callsSince(from)
			require.Contains(t, calls, "LoadPeers [p0]")
			require.Len(t, s.d.sent, 1)
			to := s.d.sent[0].Peer
			assert.NotEqual(t, old, to, "the notification goes to the reloaded id")
			assert.Equal(t, "p0", s.d.peers[to])
			assert.Equal(t, "p0", s.d.peers[old], "the old id stays loaded: the dlist names it")
			assert.Less(t, indexOf(calls, "LoadPeers [p0]"), indexOfPrefix(calls, "SendNotifications"), "reload before the send")

			// Later notifications go to the new id, with no reload.
			from = len(s.d.calls)
			s.finish("c", hc)
			assert.NotContains(t, s.d.callsSince(from), "LoadPeers [p0]")
			require.Len(t, s.d.sent, 2)
			assert.Equal(t, to, s.d.sent[1].Peer)

			// Removing the peer releases its dlist, then both ids.
			require.NoError(t, s.c.RemovePeer(s.now, "p"))
			s.settle()
			s.poll()
			assert.Equal(t, uint64(0), s.d.held().Peers)
			assert.Equal(t, uint64(1), s.d.held().Dlists, "only the pool's local dlist is left")
			assert.Zero(t, s.c.Stats().RetiredPeers)
		})
	}
}

// A first notification refused as INVALID_ARGUMENT (the message was bad),
// or a failure of a notification after the first, reloads nothing.
func TestNotificationFailureWithoutReload(t *testing.T) {
	t.Run("invalid argument", func(t *testing.T) {
		s := newSrig(t, Config{}, nil)
		s.connect(peerSpec("p", 1))
		s.d.failItem(WorkSendNotifications, 0, sdk.Errorf(sdk.CodeInvalidArgument, "double: bad message"), 1)
		s.finish("a", s.readNotify("a"))
		from := len(s.d.calls)
		s.finish("b", s.readNotify("b"))
		assert.NotContains(t, s.d.callsSince(from), "LoadPeers [p0]")
		require.Len(t, s.d.sent, 1)
		assert.Equal(t, s.c.peers["p"].ranks[0].id, s.d.sent[0].Peer)
	})
	t.Run("not the first", func(t *testing.T) {
		s := newSrig(t, Config{}, nil)
		s.connect(peerSpec("p", 1))
		s.finish("a", s.readNotify("a"))
		// A later notification that travels on its own (a one-part read's
		// would ride with its transfer) fails.
		s.d.failItem(WorkSendNotifications, 0, sdk.Errorf(sdk.CodeRemoteDisconnect, "double: lost"), 1)
		require.NoError(t, s.c.NotifyConsumed("p", "b", tok("b")))
		s.settle()
		from := len(s.d.calls)
		require.NoError(t, s.c.NotifyConsumed("p", "c", tok("c")))
		s.settle()
		assert.NotContains(t, s.d.callsSince(from), "LoadPeers [p0]")
		require.Len(t, s.d.sent, 2)
		assert.Equal(t, s.d.sent[0].Peer, s.d.sent[1].Peer)
	})
}

// A reload that fails sends the held notification to the old id and is
// tried again before the next one; a peer removed while its rank reloads
// releases the new id with its other natives.
func TestReloadFailureAndRemoval(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 1))
	old := s.c.peers["p"].ranks[0].id
	s.d.failItem(WorkSendNotifications, 0, sdk.Errorf(sdk.CodeRemoteDisconnect, "double: lost"), 1)
	s.finish("a", s.readNotify("a"))

	s.d.failItem(WorkLoadPeers, 0, sdk.Errorf(sdk.CodeRemoteDisconnect, "double: gone"), 1)
	rd := s.finish("b", s.readNotify("b"))
	assert.Contains(t, alertKinds(rd), "peer_reload_failed")
	require.Len(t, s.d.sent, 1)
	assert.Equal(t, old, s.d.sent[0].Peer, "held notification sent to the old id")

	// Still stale: the next notification reloads first. The peer is
	// removed while that reload is outstanding.
	h := s.readNotify("c")
	s.d.set(h, sdk.StateDone, nil)
	rd = s.c.Poll(s.now)
	var load *Work
	for {
		for i := range rd.Work {
			w := rd.Work[i]
			if w.Kind == WorkLoadPeers {
				load = &w
				continue
			}
			res, err := s.d.exec(w)
			s.c.Done(w.ID, res, err)
		}
		if load != nil || len(rd.Work) == 0 {
			break
		}
		rd = s.c.Ready()
	}
	require.NotNil(t, load, "a reload before the notification")
	require.NoError(t, s.c.RemovePeer(s.now, "p"))
	s.settle()
	s.poll()
	assert.Equal(t, 1, s.c.Stats().RetiredPeers, "held while its reload is outstanding")
	res, err := s.d.exec(*load)
	s.c.Done(load.ID, res, err)
	rd = s.drive(s.c.Ready())
	assert.Contains(t, alertKinds(rd), "consumed_notification_failed")
	s.poll()
	assert.Equal(t, uint64(0), s.d.held().Peers)
	assert.Zero(t, s.c.Stats().RetiredPeers)
	assert.Len(t, s.d.sent, 1)
}

func alertKinds(rd Ready) []string {
	var out []string
	for _, a := range rd.Alerts {
		out = append(out, a.Kind)
	}
	return out
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

func indexOfPrefix(xs []string, p string) int {
	for i, v := range xs {
		if len(v) >= len(p) && v[:len(p)] == p {
			return i
		}
	}
	return -1
}
