package core

import (
	"fmt"
	"slices"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// DefaultEarlyNotificationAge is how long core keeps a notification that
// came before its request was registered (Config.EarlyNotificationAge).
// Such a notification is a race of the two engines' steps, milliseconds
// long; one older than this belongs to no request that is coming.
const DefaultEarlyNotificationAge = 60 * time.Second

// earlyNote is what core keeps of the notifications of one kind (consumed
// or written) for a request not registered yet: the distinct agents that
// sent one with the token each gave, and when the first came (UnixNano of
// the now core was given).
type earlyNote struct {
	at   int64
	from []earlyFrom
}

type earlyFrom struct {
	agent string
	token Token
}

// earlyRef queues an earlyNote by age, so expiry pops only the expired.
type earlyRef struct {
	id      RequestID
	at      int64
	written bool
}

// recentIDs remembers the last max keys added, of requests reported
// (finished or failed): the sends and receives whose late or duplicated
// notifications are dropped instead of being kept as early ones for a
// later request under the same id (recentKey), and the requests whose
// retries are told from new ones (retry.go). It is bounded: a ring of the
// last max keys.
type recentIDs[K comparable] struct {
	ring []recentSlot[K] // grows to max, then wraps at next
	max  int
	next int
	seq  uint64
	m    map[K]uint64 // the seq of the newest slot of each key
}

type recentKey struct {
	id      RequestID
	written bool // a receive's id (written notifications), else a send's (consumed)
}

type recentSlot[K comparable] struct {
	k   K
	seq uint64
}

func newRecentIDs[K comparable](n int) recentIDs[K] {
	return recentIDs[K]{max: n, m: map[K]uint64{}}
}

func (s *recentIDs[K]) add(k K) {
	s.seq++
	if len(s.ring) < s.max {
		s.ring = append(s.ring, recentSlot[K]{k, s.seq})
	} else {
		old := s.ring[s.next]
		if s.m[old.k] == old.seq {
			delete(s.m, old.k)
		}
		s.ring[s.next] = recentSlot[K]{k, s.seq}
		s.next = (s.next + 1) % len(s.ring)
	}
	s.m[k] = s.seq
}

func (s *recentIDs[K]) has(k K) bool { _, ok := s.m[k]; return ok }

// noteNotification counts a consumed (written false) or written
// notification of request id with token from agent against its send or
// receive, or keeps it (bounded in number and age) for one not registered
// yet. A request counts each agent once, only with its own token, and a
// request tied to a peer counts only agents that are ranks of that peer.
// Notifications of a send or receive reported recently are late or
// duplicated: they are dropped.
func (c *Core) noteNotification(id RequestID, token Token, from string, written bool) {
	var r *request
	if written {
		if rv := c.recvs[id]; rv != nil {
			r = rv.r
		}
	} else {
		r = c.sends[id]
	}
	if r != nil {
		c.countSender(r, token, from)
		return
	}
	if c.reqs.get(id) != nil {
		return // a request of ours under the same id of another kind
	}
	if c.recent.has(recentKey{id, written}) {
		c.alert(Alert{Level: AlertWarn, Kind: "late_notification_dropped", Request: id, Err: fmt.Errorf("request %q was already reported; a notification from agent %q came late or twice", id, from)})
		return
	}
	m := c.early
	if written {
		m = c.earlyW
	}
	e := m[id]
	if e == nil {
		if c.earlyCount() >= c.cfg.MaxEarlyNotifications {
			c.alert(Alert{Level: AlertWarn, Kind: "early_notification_dropped", Request: id, Err: sdk.Errorf(sdk.CodeBusy, "%d early notifications kept already", c.earlyCount())})
			return
		}
		e = &earlyNote{at: c.now}
		m[id] = e
		c.earlyQ = append(c.earlyQ, earlyRef{id: id, at: c.now, written: written})
	}
	if !slices.Contains(e.from, earlyFrom{from, token}) {
		e.from = append(e.from, earlyFrom{from, token})
	}
}

// countSender counts agent from once for r, if it may notify r: it must
// give r's token and, when r is tied to a peer, be one of its ranks.
func (c *Core) countSender(r *request, token Token, from string) {
	if token != r.token {
		c.alert(Alert{Level: AlertWarn, Kind: "stale_notification_dropped", Peer: r.peerName(), Request: r.id, Err: fmt.Errorf("agent %q notified request %q with token %016x, but it is registered with token %016x: a notification of an earlier request under the same id, ignored", from, r.id, uint64(token), uint64(r.token))})
		return
	}
	if !fromPeer(r, from) {
		c.alert(Alert{Level: AlertWarn, Kind: "notification_from_stranger", Peer: r.peerName(), Request: r.id, Err: fmt.Errorf("agent %q is not a rank of peer %q: notification ignored", from, r.peerName())})
		return
	}
	if r.notifiedBy(from) {
		return
	}
	if r.from == nil {
		r.from = new([]string)
	}
	*r.from = append(*r.from, from)
	r.notified = int32(len(*r.from))
	c.markDirty(r)
}

// fromPeer reports whether agent may notify r: any agent when r is tied to
// no peer, else only its peer's ranks.
func fromPeer(r *request, agent string) bool {
	if r.peer == nil {
		return true
	}
	for _, rk := range r.peer.ranks {
		if rk.spec.Agent == agent {
			return true
		}
	}
	return false
}

// adoptEarly counts the notifications kept for r before it was registered.
func (c *Core) adoptEarly(r *request, written bool) {
	c.expireEarly()
	m := c.early
	if written {
		m = c.earlyW
	}
	e := m[r.id]
	if e == nil {
		return
	}
	delete(m, r.id)
	for _, f := range e.from {
		c.countSender(r, f.token, f.agent)
	}
}

// expireEarly drops kept notifications older than
// Config.EarlyNotificationAge.
func (c *Core) expireEarly() {
	q := c.earlyQ
	i := c.earlyHead
	for ; i < len(q) && q[i].at+int64(c.cfg.EarlyNotificationAge) <= c.now; i++ {
		m := c.early
		if q[i].written {
			m = c.earlyW
		}
		if e := m[q[i].id]; e != nil && e.at == q[i].at {
			delete(m, q[i].id)
		}
		q[i] = earlyRef{}
	}
	c.earlyHead = i
	if c.earlyHead > len(q)/2 {
		n := copy(q, q[c.earlyHead:])
		c.earlyQ, c.earlyHead = q[:n], 0
	}
}

func (c *Core) earlyCount() int { return len(c.early) + len(c.earlyW) }
