package fake

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// TestTransferBytes moves ranges of every size class at odd offsets both
// ways and checks that exactly those bytes changed.
func TestTransferBytes(t *testing.T) {
	sizes := []int{1, 3, 4095, 4096, 65537, 1<<20 + 3, 64 << 20}
	for _, op := range []sdk.Op{sdk.OpWrite, sdk.OpRead} {
		for _, n := range sizes {
			t.Run(fmt.Sprintf("%v/%d", op, n), func(t *testing.T) {
				size := n + 8192
				p := newPair(t, size, nil, nil)
				lo, ro := uint64(7), uint64(4097) // odd, unaligned offsets
				local := prepare(t, p.a, 0, sdk.Descriptor{Region: p.aRegion, Offset: lo, Length: uint64(n)})
				remote := prepare(t, p.a, p.peer, sdk.Descriptor{Region: p.bRegion, Offset: ro, Length: uint64(n)})
				aBefore, bBefore := readFile(t, p.aPath), readFile(t, p.bPath)

				h := postOne(t, p.a, sdk.PostSpec{Op: op, Local: local, LocalIndices: []uint32{0}, Remote: remote, RemoteIndices: []uint32{0}})
				st := terminal(t, p.a, h)
				require.Equal(t, sdk.StateDone, st.State, "reason: %v", st.Reason)

				want := bytes.Clone(bBefore)
				src, dst, dstPath := aBefore[lo:lo+uint64(n)], want[ro:], p.bPath
				if op == sdk.OpRead {
					want = bytes.Clone(aBefore)
					src, dst, dstPath = bBefore[ro:ro+uint64(n)], want[lo:], p.aPath
				}
				copy(dst, src)
				require.True(t, bytes.Equal(want, readFile(t, dstPath)), "destination differs from the expected bytes")
				release(t, p.a, h)
				errs, err := p.a.ReleaseDescriptors(ctx, []sdk.DlistID{local, remote})
				require.NoError(t, err)
				require.NoError(t, errs[0])
				require.NoError(t, errs[1])
			})
		}
	}
}

// TestManyDescriptors moves many small, randomly placed descriptors in one
// post, paired in a shuffled order, and checks every byte.
func TestManyDescriptors(t *testing.T) {
	const size, count = 1 << 20, 1000
	rng := rand.New(rand.NewPCG(7, 7))
	p := newPair(t, size, map[string]string{"chunk": "1000"}, nil)
	var ld, rd []sdk.Descriptor
	for i := 0; i < count; i++ {
		n := uint64(1 + rng.IntN(500))
		// Slot i of 1000 equal slots, so no two descriptors overlap.
		slot := uint64(size / count)
		ld = append(ld, sdk.Descriptor{Region: p.aRegion, Offset: uint64(i)*slot + uint64(rng.IntN(int(slot-n))), Length: n})
		rd = append(rd, sdk.Descriptor{Region: p.bRegion, Offset: uint64(i)*slot + uint64(rng.IntN(int(slot-n))), Length: n})
	}
	// Pair local i with remote perm[i], giving remote perm[i] local i's length.
	perm := rng.Perm(count)
	for i, j := range perm {
		rd[j].Length = ld[i].Length
	}
	local := prepare(t, p.a, 0, ld...)
	remote := prepare(t, p.a, p.peer, rd...)
	li, ri := make([]uint32, count), make([]uint32, count)
	for i, j := range perm {
		li[i], ri[i] = uint32(i), uint32(j)
	}
	aBefore, want := readFile(t, p.aPath), readFile(t, p.bPath)
	h := postOne(t, p.a, sdk.PostSpec{Op: sdk.OpWrite, Local: local, LocalIndices: li, Remote: remote, RemoteIndices: ri})
	require.Equal(t, sdk.StateDone, terminal(t, p.a, h).State)
	for i, j := range perm {
		copy(want[rd[j].Offset:rd[j].Offset+rd[j].Length], aBefore[ld[i].Offset:ld[i].Offset+ld[i].Length])
	}
	require.True(t, bytes.Equal(want, readFile(t, p.bPath)))
	release(t, p.a, h)
	_, err := p.a.ReleaseDescriptors(ctx, []sdk.DlistID{local, remote})
	require.NoError(t, err)
}

// TestLoopback loads an agent's own metadata and moves bytes between two
// of its regions (Capabilities.Local).
func TestLoopback(t *testing.T) {
	a := open(t, "self", nil)
	src, dst := regionFile(t, 10000, 3), regionFile(t, 10000, 4)
	r1 := register(t, a, sdk.Region{Path: src, Length: 10000})
	r2 := register(t, a, sdk.Region{Path: dst, Length: 10000})
	self := loadPeer(t, a, a)
	local := prepare(t, a, 0, sdk.Descriptor{Region: r1, Length: 10000})
	remote := prepare(t, a, self, sdk.Descriptor{Region: r2, Length: 10000})
	h := postOne(t, a, sdk.PostSpec{Op: sdk.OpWrite, Local: local, LocalIndices: []uint32{0}, Remote: remote, RemoteIndices: []uint32{0}, Notification: []byte("hi")})
	require.Equal(t, sdk.StateDone, terminal(t, a, h).State)
	require.Equal(t, readFile(t, src), readFile(t, dst))
	notes := drainNotes(t, a, 1)
	require.Equal(t, []sdk.Notification{{From: "self", Message: []byte("hi")}}, notes)
	release(t, a, h)
	_, _ = a.ReleaseDescriptors(ctx, []sdk.DlistID{local, remote})
	_, _ = a.UnloadPeers(ctx, []sdk.PeerID{self})
	_, _ = a.DeregisterMemory(ctx, []sdk.RegionID{r1, r2})
}
