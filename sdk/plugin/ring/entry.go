package ring

import (
	"encoding/binary"
	"math"
)

// An entry is the fixed part of one call, result or push in either ring;
// its kind says which, and its arena bytes carry the items (wire.go).

// Entry kinds. Submission kinds travel host -> plugin, completion kinds
// plugin -> host.
const (
	kindPost         uint16 = 1 // items: PostSpec
	kindRelease      uint16 = 2 // items: HandleID
	kindDrainEvents  uint16 = 3 // fetch the transport's events now; no items
	kindDrainNotes   uint16 = 4 // fetch the transport's notifications now; no items
	kindDetach       uint16 = 5 // stop serving the rings (after Close)
	kindSendNotes    uint16 = 6 // items: OutboundNotification
	kindPostResult   uint16 = 16
	kindReleaseRes   uint16 = 17
	kindDrainResult  uint16 = 18 // ends a drain call; code is the drain's
	kindEvents       uint16 = 19 // items: Event, forwarded from EventSource
	kindStates       uint16 = 20 // items: Event, terminal states the plugin polled
	kindNotes        uint16 = 21 // items: Notification
	kindFatal        uint16 = 22 // the plugin stops serving: a message
	kindSendNotesRes uint16 = 23 // items: error, one per notification
	maxItems                = 1 << 22
	maxMessage              = 64 << 10
)

// entry is one fixed 64-byte entry:
//
//	0  seq       u64  index of the entry in its ring
//	8  kind      u16
//	10 code      u16  a result's call-level code (0: the call succeeded)
//	16 call      u64  the call an entry submits or answers (0: none)
//	24 first     u32  index of this part's first item in the call
//	28 count     u32  items in this part
//	32 total     u32  items in the call
//	40 deadline  i64  a submission's deadline, Unix nanoseconds (0: none)
//	48 arenaOff  u32  this entry's bytes in the arena
//	52 arenaLen  u32
//	56 sent      i64  when it was published, Unix nanoseconds (a hint
//	                  for the consumer's spinning, never trusted)
type entry struct {
	seq                 uint64
	kind, code          uint16
	call                uint64
	first, count, total uint32
	deadline            int64
	arenaOff, arenaLen  uint32
	sent                int64
}

func (e *entry) encode(b []byte) {
	_ = b[entrySize-1]
	le := binary.LittleEndian
	le.PutUint64(b[0:], e.seq)
	le.PutUint16(b[8:], e.kind)
	le.PutUint16(b[10:], e.code)
	le.PutUint32(b[12:], 0)
	le.PutUint64(b[16:], e.call)
	le.PutUint32(b[24:], e.first)
	le.PutUint32(b[28:], e.count)
	le.PutUint32(b[32:], e.total)
	le.PutUint32(b[36:], 0)
	le.PutUint64(b[40:], uint64(e.deadline))
	le.PutUint32(b[48:], e.arenaOff)
	le.PutUint32(b[52:], e.arenaLen)
	le.PutUint64(b[56:], uint64(e.sent))
}

func (e *entry) decode(b []byte) {
	_ = b[entrySize-1]
	le := binary.LittleEndian
	e.seq = le.Uint64(b[0:])
	e.kind = le.Uint16(b[8:])
	e.code = le.Uint16(b[10:])
	e.call = le.Uint64(b[16:])
	e.first = le.Uint32(b[24:])
	e.count = le.Uint32(b[28:])
	e.total = le.Uint32(b[32:])
	e.deadline = int64(le.Uint64(b[40:]))
	e.arenaOff = le.Uint32(b[48:])
	e.arenaLen = le.Uint32(b[52:])
	e.sent = int64(le.Uint64(b[56:]))
}

// check says what is wrong with an entry read from a ring: its kind for
// that direction, its counts, its code.
func (e *entry) check(submission bool) error {
	switch e.kind {
	case kindPost, kindRelease, kindDrainEvents, kindDrainNotes, kindDetach, kindSendNotes:
		if !submission {
			return violationf("entry %d: submission kind %d in the completion ring", e.seq, e.kind)
		}
	case kindPostResult, kindReleaseRes, kindDrainResult, kindEvents, kindStates, kindNotes, kindFatal, kindSendNotesRes:
		if submission {
			return violationf("entry %d: completion kind %d in the submission ring", e.seq, e.kind)
		}
	default:
		return violationf("entry %d: unknown kind %d", e.seq, e.kind)
	}
	if e.total > maxItems {
		return violationf("entry %d (kind %d): %d items, more than %d", e.seq, e.kind, e.total, maxItems)
	}
	if uint64(e.first)+uint64(e.count) > uint64(e.total) {
		return violationf("entry %d (kind %d): items [%d, +%d) outside the call's %d", e.seq, e.kind, e.first, e.count, e.total)
	}
	if e.code > math.MaxUint8 {
		return violationf("entry %d (kind %d): code %d out of range", e.seq, e.kind, e.code)
	}
	if e.code != 0 && e.count != 0 {
		return violationf("entry %d (kind %d): a call-level error with %d items", e.seq, e.kind, e.count)
	}
	return nil
}
