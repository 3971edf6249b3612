package core

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A call that repeats a request the Core took, by id, token and kind, is a
// retry of a call whose reply was lost: refused with ErrDuplicate while the
// request is in flight and after its report, changing nothing, so that the
// blocks never move twice. The same id with another token is a new request
// (taken once the id is free). One test per kind of request.
func TestARetryIsNeverTakenAsANewRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(s *srig, token Token, b []uint32) error
		end  func(s *srig) // makes the request reportable
	}{
		{"read", func(s *srig, token Token, b []uint32) error {
			return s.c.Read(s.now, ReadSpec{Request: "x", Token: token, Peer: "p", NotifyProducer: true, Parts: []Part{{Pool: s.pool, Local: b, Rank: 0, Remote: []uint32{0}}}})
		}, func(s *srig) { s.done() }},
		{"write", func(s *srig, token Token, b []uint32) error {
			return s.c.Write(s.now, WriteSpec{Request: "x", Token: token, Peer: "p", Consumers: 1, Lease: time.Second, Parts: []Part{{Pool: s.pool, Local: b, Rank: 0, Remote: []uint32{0}}}})
		}, func(s *srig) { s.done(); s.now = s.now.Add(time.Second) }},
		{"send", func(s *srig, token Token, b []uint32) error {
			return s.c.ExpectSend(s.now, SendSpec{Request: "x", Token: token, Peer: "p", Pool: s.pool, Blocks: b, Consumers: 1, Lease: time.Second})
		}, func(s *srig) { s.now = s.now.Add(time.Second) }},
		{"receive", func(s *srig, token Token, b []uint32) error {
			return s.c.ExpectReceive(s.now, RecvSpec{Request: "x", Token: token, Peer: "p", Pool: s.pool, Blocks: b, Producers: 1, Lease: time.Second})
		}, func(s *srig) { s.now = s.now.Add(time.Second) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openSrig(t, Config{Escalation: EscalateQuarantine}, nil)
			s.connect(peerSpec("p", 1))
			first, again := s.alloc(1), s.alloc(1)
			require.NoError(t, s.do(tc.call(s, tok("x"), first)))
			refused := func(when string) {
				t.Helper()
				before := s.c.Stats()
				err := s.do(tc.call(s, tok("x"), again))
				require.ErrorIs(t, err, ErrDuplicate, "a retry %s", when)
				assert.Equal(t, before, s.c.Stats(), "a retry %s changes nothing", when)
				assert.Equal(t, OwnerEngine, s.c.Owner(BlockRef{s.pool, again[0]}))
			}
			refused("while its request is in flight")
			tc.end(s)
			s.reported("x")
			refused("after its request was reported")
			delete(s.seen, "x")
			require.NoError(t, s.do(tc.call(s, tok("x, a new request"), again)), "a new token is a new request")
			tc.end(s)
			s.reported("x")
		})
	}
}

// The Core remembers the last MaxRecentRequests reported requests: a retry
// of an older one is taken as new. A Read without a token (it notifies no
// one) cannot be told from a new request: it is taken once its id is free.
func TestRetriesAreToldForTheLastRecentRequests(t *testing.T) {
	s := openSrig(t, Config{MaxRecentRequests: 2}, nil)
	s.connect(peerSpec("p", 1))
	read := func(id RequestID, token Token) error {
		b := s.alloc(1)
		return s.do(s.c.Read(s.now, ReadSpec{Request: id, Token: token, Peer: "p", Parts: []Part{{Pool: s.pool, Local: b, Rank: 0, Remote: []uint32{0}}}}))
	}
	for i := range 3 {
		id := RequestID(fmt.Sprint("r", i))
		require.NoError(t, read(id, tok(id)))
		s.done()
		s.reported(id)
	}
	require.ErrorIs(t, read("r2", tok("r2")), ErrDuplicate)
	require.ErrorIs(t, read("r1", tok("r1")), ErrDuplicate)
	require.NoError(t, read("r0", tok("r0")), "past the bound: taken as new")
	s.done()
	delete(s.seen, "r0")
	s.reported("r0")

	require.NoError(t, read("z", 0))
	s.done()
	s.reported("z")
	delete(s.seen, "z")
	require.NoError(t, read("z", 0), "no token: nothing tells a retry")
	s.done()
	s.reported("z")

	_, err := New(Config{MaxRecentRequests: -1})
	require.ErrorContains(t, err, "MaxRecentRequests")
}
