package core

import (
	"cmp"
	"iter"
	"slices"

	"github.com/custody-dev/custody/sdk"
)

// handleIndex finds every live handle of the attached epoch by its id: the
// transport names them so in events, polls and releases. Transports issue
// ids from a counter (never reused within a process), so the ids in flight
// are mostly a window of recent ones: slot id&mask of a table at least
// twice as large as the window holds each, and a lookup is one array read
// instead of a hash-map probe (a cache miss saved per state change at
// 100000 handles in flight). An id whose slot another live handle holds
// goes to a spill map, so any id scheme stays correct.
type handleIndex struct {
	slots []*xfer
	spill map[sdk.HandleID]*xfer
	n     int
}

const minHandleSlots = 1024

func newHandleIndex() handleIndex {
	return handleIndex{slots: make([]*xfer, minHandleSlots), spill: map[sdk.HandleID]*xfer{}}
}

func (ix *handleIndex) slot(h sdk.HandleID) int { return int(uint64(h) & uint64(len(ix.slots)-1)) }

// get returns the live handle h, or nil.
func (ix *handleIndex) get(h sdk.HandleID) *xfer {
	if x := ix.slots[ix.slot(h)]; x != nil && x.ref.Handle == h {
		return x
	}
	if len(ix.spill) > 0 {
		return ix.spill[h]
	}
	return nil
}

// add indexes x, whose handle no indexed one has.
func (ix *handleIndex) add(x *xfer) {
	if 2*(ix.n+1) > len(ix.slots) {
		ix.resize(2 * len(ix.slots))
	}
	ix.place(x)
	ix.n++
}

func (ix *handleIndex) place(x *xfer) {
	if i := ix.slot(x.ref.Handle); ix.slots[i] == nil {
		ix.slots[i] = x
	} else {
		ix.spill[x.ref.Handle] = x
	}
}

// remove drops x from the index.
func (ix *handleIndex) remove(x *xfer) {
	h := x.ref.Handle
	if i := ix.slot(h); ix.slots[i] == x {
		ix.slots[i] = nil
	} else {
		delete(ix.spill, h)
	}
	ix.n--
}

// shrink halves the table when it is mostly empty, so memory follows what
// is in flight; and re-places spilled handles when they pile up. Call it
// outside any iteration (all).
func (ix *handleIndex) shrink() {
	switch {
	case len(ix.slots) > minHandleSlots && 8*ix.n < len(ix.slots):
		ix.resize(len(ix.slots) / 2)
	case len(ix.spill) > 64 && 8*len(ix.spill) > ix.n:
		ix.resize(len(ix.slots))
	}
}

// resize re-places every handle in a table of n slots.
func (ix *handleIndex) resize(n int) {
	old, spill := ix.slots, ix.spill
	ix.slots, ix.spill = make([]*xfer, n), map[sdk.HandleID]*xfer{}
	for _, x := range old {
		if x != nil {
			ix.place(x)
		}
	}
	for _, x := range sortedSpill(spill) {
		ix.place(x)
	}
}

// sortedSpill is the spilled handles by id: iterating the map itself would
// hand them out in Go's random map order.
func sortedSpill(spill map[sdk.HandleID]*xfer) []*xfer {
	if len(spill) == 0 {
		return nil
	}
	out := make([]*xfer, 0, len(spill))
	for _, x := range spill {
		out = append(out, x)
	}
	slices.SortFunc(out, func(a, b *xfer) int { return cmp.Compare(a.ref.Handle, b.ref.Handle) })
	return out
}

func (ix *handleIndex) len() int { return ix.n }

// all yields every indexed handle; removing the yielded one is allowed,
// adding one is not.
func (ix *handleIndex) all() iter.Seq[*xfer] {
	return func(yield func(*xfer) bool) {
		slots, spill := ix.slots, ix.spill
		for i := 0; i < len(slots); i++ {
			if x := slots[i]; x != nil && !yield(x) {
				return
			}
		}
		for _, x := range sortedSpill(spill) {
			if !yield(x) {
				return
			}
		}
	}
}
