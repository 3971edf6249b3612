package ucx

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

func TestAppendSegmentMergesOnlyWhatContinues(t *testing.T) {
	var k1, k2, m1, m2 byte
	rk1, rk2 := cRkey(unsafe.Pointer(&k1)), cRkey(unsafe.Pointer(&k2))
	mh1, mh2 := cMemh(unsafe.Pointer(&m1)), cMemh(unsafe.Pointer(&m2))
	seg := func(l uintptr, r, n uint64) segment {
		return segment{laddr: l, raddr: r, size: n, rkey: rk1, memh: mh1}
	}
	with := func(g segment, f func(*segment)) segment { f(&g); return g }
	tests := []struct {
		name string
		in   []segment
		want []segment
	}{
		{"one", []segment{seg(100, 1000, 10)}, []segment{seg(100, 1000, 10)}},
		{"contiguous on both sides", []segment{seg(100, 1000, 10), seg(110, 1010, 20), seg(130, 1030, 5)}, []segment{seg(100, 1000, 35)}},
		{"local gap", []segment{seg(100, 1000, 10), seg(111, 1010, 20)}, []segment{seg(100, 1000, 10), seg(111, 1010, 20)}},
		{"remote gap", []segment{seg(100, 1000, 10), seg(110, 1011, 20)}, []segment{seg(100, 1000, 10), seg(110, 1011, 20)}},
		{"reversed order", []segment{seg(110, 1010, 10), seg(100, 1000, 10)}, []segment{seg(110, 1010, 10), seg(100, 1000, 10)}},
		{"other remote key", []segment{seg(100, 1000, 10), with(seg(110, 1010, 10), func(g *segment) { g.rkey = rk2 })},
			[]segment{seg(100, 1000, 10), with(seg(110, 1010, 10), func(g *segment) { g.rkey = rk2 })}},
		{"other memory handle", []segment{seg(100, 1000, 10), with(seg(110, 1010, 10), func(g *segment) { g.memh = mh2 })},
			[]segment{seg(100, 1000, 10), with(seg(110, 1010, 10), func(g *segment) { g.memh = mh2 })}},
		{"merge then gap then merge", []segment{seg(100, 1000, 10), seg(110, 1010, 10), seg(200, 2000, 10), seg(210, 2010, 10)},
			[]segment{seg(100, 1000, 20), seg(200, 2000, 20)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []segment
			for _, g := range tt.in {
				got = appendSegment(got, g)
			}
			assert.Equal(t, view(tt.want), view(got))
		})
	}
}

// segView is a segment with its C handles as plain addresses, which
// reflection (testify) can compare.
type segView struct {
	laddr      uintptr
	raddr      uint64
	size       uint64
	rkey, memh uintptr
}

func view(segs []segment) []segView {
	out := make([]segView, len(segs))
	for i, g := range segs {
		out[i] = segView{g.laddr, g.raddr, g.size, uintptr(unsafe.Pointer(g.rkey)), uintptr(unsafe.Pointer(g.memh))}
	}
	return out
}
