package core

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// The handle index finds every live handle, whether it sits in its slot or
// spilled because another live handle holds the slot, across growth,
// removal while iterating, and shrinking.
func TestHandleIndex(t *testing.T) {
	ix := newHandleIndex()
	mk := func(h sdk.HandleID) *xfer { return &xfer{ref: Ref{Epoch: 1, Handle: h}} }
	// Handles 1, 1+1024 and 1+2048 share slot 1 of the first table.
	xs := []*xfer{mk(1), mk(1 + minHandleSlots), mk(1 + 2*minHandleSlots), mk(7)}
	for _, x := range xs {
		ix.add(x)
	}
	assert.Len(t, ix.spill, 2, "two handles spilled")
	for _, x := range xs {
		assert.Same(t, x, ix.get(x.ref.Handle))
	}
	assert.Nil(t, ix.get(2))
	assert.Nil(t, ix.get(1+3*minHandleSlots), "a free id of an occupied slot")

	// Growth: 3000 sequential handles more, all found, none spilled.
	for h := sdk.HandleID(10000); h < 13000; h++ {
		x := mk(h)
		xs = append(xs, x)
		ix.add(x)
	}
	assert.GreaterOrEqual(t, len(ix.slots), 2*ix.len())
	for _, x := range xs {
		require.Same(t, x, ix.get(x.ref.Handle), "handle %d", x.ref.Handle)
	}

	// Removing every yielded handle while iterating yields each once.
	seen := map[sdk.HandleID]int{}
	for x := range ix.all() {
		seen[x.ref.Handle]++
		ix.remove(x)
	}
	assert.Len(t, seen, len(xs))
	for h, n := range seen {
		assert.Equal(t, 1, n, "handle %d yielded %d times", h, n)
	}
	assert.Zero(t, ix.len())
	for _, x := range xs {
		assert.Nil(t, ix.get(x.ref.Handle))
	}
	for range 10 {
		ix.shrink()
	}
	assert.Len(t, ix.slots, minHandleSlots, "memory follows what is in flight")
}

// The request index finds every request by id across chains (more
// requests than buckets), growth, removal while iterating, and shrinking.
func TestReqIndex(t *testing.T) {
	ix := newReqIndex()
	var rs []*request
	for i := range 3000 {
		r := &request{id: RequestID(fmt.Sprint("req-", i))}
		rs = append(rs, r)
		ix.add(r)
		if i == minReqBuckets-1 {
			assert.Len(t, ix.buckets, minReqBuckets, "grown before it had to")
			chained := 0
			for _, b := range ix.buckets {
				if b != nil && b.next != nil {
					chained++
				}
			}
			assert.NotZero(t, chained, "a full table has chains")
		}
	}
	assert.Equal(t, 3000, ix.len())
	for _, r := range rs {
		require.Same(t, r, ix.get(r.id), "request %q", r.id)
	}
	assert.Nil(t, ix.get("req-3000"))
	// Remove every other one, then check the rest are still found.
	for i := 0; i < len(rs); i += 2 {
		ix.remove(rs[i])
	}
	for i, r := range rs {
		if i%2 == 0 {
			require.Nil(t, ix.get(r.id), "removed request %q found", r.id)
		} else {
			require.Same(t, r, ix.get(r.id), "request %q", r.id)
		}
	}
	seen := map[RequestID]int{}
	for r := range ix.all() {
		seen[r.id]++
		ix.remove(r)
	}
	assert.Len(t, seen, 1500)
	for id, n := range seen {
		assert.Equal(t, 1, n, "request %q yielded %d times", id, n)
	}
	assert.Zero(t, ix.len())
	for range 10 {
		ix.shrink()
	}
	assert.Len(t, ix.buckets, minReqBuckets, "memory follows what is in flight")
}
