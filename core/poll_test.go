package core

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// Rule 1, nothing is released while it may still be touched, with rule 2:
// a handle whose Poll fails has an unknown state, not a terminal one: it is
// neither released nor failed, even once it is DONE underneath, and the
// request finishes normally once a poll sees it DONE. Polling is the
// fallback for transports without events (the double offers none).
func TestPollErrorIsNotTerminal(t *testing.T) {
	s := openSrig(t, Config{}, nil)
	require.False(t, s.c.events, "the double offers no events: core polls")
	s.connect(peerSpec("p", 2))
	blocks := s.read("r", "p", 1)
	h := s.d.live()[0]
	s.d.failHandle(WorkPoll, h, sdk.Errorf(sdk.CodeBackend, "double: injected poll failure"), 3)
	failed := func() int {
		n := 0
		for _, a := range s.all.Alerts {
			if a.Kind == "transfer_poll_failed" {
				n++
			}
		}
		return n
	}
	s.poll()
	s.poll()
	s.d.set(h, sdk.StateDone, nil) // the third failed poll misses it
	s.poll()
	require.Equal(t, 3, failed(), "three failed polls")
	assert.Zero(t, s.d.count(WorkRelease), "released a handle of unknown state")
	assert.Equal(t, OwnerTransfer, s.c.Owner(blocks[0]))
	rd := s.reported("r")
	assert.Equal(t, []RequestID{"r"}, rd.FinishedReceiving, "a poll error failed the request")
	assert.Empty(t, s.d.releasedEarly)
}

// Rules 2 and 13: a round whose context has expired does nothing unsafe:
// no handle counts as released, no request is reported; the next round
// with time left finishes the work.
func TestExpiredContextChangesNothingUnsafe(t *testing.T) {
	s := openSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 2))
	blocks := s.read("r", "p", 1)
	h := s.d.live()[0]
	s.d.set(h, sdk.StateDone, nil)
	// Mark it terminal in core, then release with a dead context: every
	// call fails as a whole before it starts, as the transports' do.
	s.c.setState(s.c.live.get(h), sdk.StateDone, nil)
	s.d.refuse = sdk.Errorf(sdk.CodeCanceled, "double: context canceled before the call started; nothing changed")
	rd := s.poll()
	s.d.refuse = nil
	assert.Equal(t, 1, s.d.count(WorkRelease), "the round tried the release")
	assert.Empty(t, rd.FinishedReceiving)
	assert.Equal(t, 1, s.c.Stats().Live, "a release that did not happen counted as done")
	assert.Equal(t, OwnerTransfer, s.c.Owner(blocks[0]))
	assert.True(t, hasAlert(rd, "transfer_release_failed"))
	rd = s.reported("r")
	assert.Equal(t, []RequestID{"r"}, rd.FinishedReceiving)
}

// Bad input is refused with an error and changes nothing.
func TestBadInputChangesNothing(t *testing.T) {
	s := openSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 2))
	b := s.alloc(2)
	good := Part{Pool: s.pool, Local: b[:1], Rank: 0, Remote: []uint32{0}}
	read := func(spec ReadSpec) error {
		err := s.c.Read(s.now, spec)
		s.settle()
		return err
	}
	for _, tc := range []struct {
		name string
		spec ReadSpec
	}{
		{"empty id", ReadSpec{Peer: "p", Parts: []Part{good}}},
		{"no peer", ReadSpec{Request: "x", Token: tok("x"), Parts: []Part{good}}},
		{"no parts", ReadSpec{Request: "x", Token: tok("x"), Peer: "p"}},
		{"unknown pool", ReadSpec{Request: "x", Token: tok("x"), Peer: "p", Parts: []Part{{Pool: 9, Local: b[:1], Remote: []uint32{0}}}}},
		{"lengths differ", ReadSpec{Request: "x", Token: tok("x"), Peer: "p", Parts: []Part{{Pool: s.pool, Local: b, Remote: []uint32{0}}}}},
		{"block listed twice", ReadSpec{Request: "x", Token: tok("x"), Peer: "p", Parts: []Part{good, good}}},
		{"free block", ReadSpec{Request: "x", Token: tok("x"), Peer: "p", Parts: []Part{{Pool: s.pool, Local: []uint32{srigBlocks - 1}, Remote: []uint32{0}}}}},
		{"rank out of range", ReadSpec{Request: "x", Token: tok("x"), Peer: "p", Parts: []Part{{Pool: s.pool, Local: b[:1], Rank: 5, Remote: []uint32{0}}}}},
		{"remote block out of range", ReadSpec{Request: "x", Token: tok("x"), Peer: "p", Parts: []Part{{Pool: s.pool, Local: b[:1], Remote: []uint32{srigBlocks}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := s.c.Stats()
			err := read(tc.spec)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "core: read request")
			assert.Equal(t, before, s.c.Stats())
			assert.Equal(t, []Owner{OwnerEngine, OwnerEngine}, s.owners([]BlockRef{{s.pool, b[0]}, {s.pool, b[1]}}))
		})
	}
	require.NoError(t, read(ReadSpec{Request: "dup", Token: tok("dup"), Peer: "p", Parts: []Part{good}}))
	err := read(ReadSpec{Request: "dup", Token: tok("other"), Peer: "p", Parts: []Part{{Pool: s.pool, Local: b[1:], Remote: []uint32{1}}}})
	require.ErrorContains(t, err, "still in flight")
	assert.NotErrorIs(t, err, ErrDuplicate, "another token: another request, not a retry")
	assert.Equal(t, OwnerEngine, s.c.Owner(BlockRef{s.pool, b[1]}))
	err = read(ReadSpec{Request: "dup", Token: tok("dup"), Peer: "p", Parts: []Part{{Pool: s.pool, Local: b[1:], Remote: []uint32{1}}}})
	require.ErrorIs(t, err, ErrDuplicate, "the same id and token: a retry")
	assert.Equal(t, OwnerEngine, s.c.Owner(BlockRef{s.pool, b[1]}))
	s.done()
	s.reported("dup")
	_, err = New(Config{HoldCap: -1})
	require.ErrorContains(t, err, "HoldCap")
}
