package conformance

import (
	"fmt"
	"math/rand/v2"

	"github.com/custody-dev/custody/sdk"
)

// guard is how many bytes either side of a destination range the data
// checks hold unchanged.
const guard = 16

// dataCase is one transfer of the sizes check: size bytes from offset from
// of the source region to offset to of the destination region.
type dataCase struct{ size, from, to uint64 }

var dataCases = []dataCase{
	{1, 0, 0},
	{1, 4095, guard + 1},
	{3, 1, guard + 7},
	{4095, guard + 2, guard + 3},
	{4097, 13, guard + 4093},
	{65536 + 7, guard + 3, guard + 5},
	{1<<20 + 13, 4096 + 1, guard + 3},
	{bigTransfer, 0, guard},
}

// checkDataSizes: byte-exact READ and WRITE of 1 B to 64 MiB at odd offsets,
// nothing outside the range touched.
var checkDataSizes = check{
	name:  "data/sizes",
	doc:   "READ and WRITE of 1 B to 64 MiB at odd offsets (one region registered at a non-zero file offset) move exactly the bytes asked, are complete when DONE is reported, and touch no byte around them",
	needs: movesData,
	run: func(e *env) {
		a, b := e.pair()
		size := uint64(bigTransfer + 2*4096)
		ra := a.regions(regionSpec{size: size, base: 4096})[0]
		rb := b.region(size)
		peer := a.loadPeer(b)
		for _, op := range []sdk.Op{sdk.OpWrite, sdk.OpRead} {
			for i, c := range dataCases {
				from, to := ra, rb
				if op == sdk.OpRead {
					from, to = rb, ra
				}
				what := fmt.Sprintf("%v of %d bytes from offset %d to offset %d", op, c.size, c.from, c.to)
				want := pattern(uint64(i)<<8|uint64(op), c.size)
				from.write(c.from, want)
				lo := c.to - min(c.to, guard)
				before := pattern(uint64(i)<<8|uint64(op)|0x80, c.to+c.size+guard-lo)
				to.write(lo, before[:c.to-lo])
				to.write(c.to+c.size, before[c.to-lo+c.size:])
				local, remote := ra.desc(c.from, c.size), rb.desc(c.to, c.size)
				if op == sdk.OpRead {
					local, remote = ra.desc(c.to, c.size), rb.desc(c.from, c.size)
				}
				ld, rd := a.dlist(0, local), a.dlist(peer, remote)
				h := a.post(sdk.PostSpec{Op: op, Local: ld, LocalIndices: []uint32{0}, Remote: rd, RemoteIndices: []uint32{0}})[0]
				st := a.wait(h)[0]
				if st.State != sdk.StateDone {
					e.t.Errorf("%s: handle %d ended %v (%v), want DONE", what, h, st.State, st.Reason)
				} else if expectBytes(to, c.to, want, what+", as soon as DONE was reported") {
					expectBytes(to, lo, before[:c.to-lo], what+": bytes before the range")
					expectBytes(to, c.to+c.size, before[c.to-lo+c.size:], what+": bytes after the range")
				}
				a.release(h)
				a.releaseDlists(ld, rd)
				if e.t.Failed() {
					return
				}
			}
		}
	},
}

// checkManyDescriptors: many descriptors per post, scattered and permuted,
// each pair moved exactly, initiated from both agents.
var checkManyDescriptors = check{
	name:  "data/many-descriptors",
	doc:   "a post of up to 256 descriptors of different lengths, its indices permuted, moves each pair exactly, for READ and WRITE, initiated by either agent",
	needs: movesData,
	run: func(e *env) {
		a, b := e.pair()
		n := 256
		for _, lim := range []uint32{e.desc.Limits.MaxDescriptorsPerList, e.desc.Limits.MaxDescriptorsPerPost} {
			if lim > 0 && int(lim) < n {
				n = int(lim)
			}
		}
		const size = 1 << 20
		ra, rb := a.region(size), b.region(size)
		ab, ba := a.loadPeer(b), b.loadPeer(a)
		for round, dir := range []struct {
			x, y   *agent
			rx, ry *region
			peer   sdk.PeerID
			op     sdk.Op
		}{
			{a, b, ra, rb, ab, sdk.OpWrite},
			{a, b, ra, rb, ab, sdk.OpRead},
			{b, a, rb, ra, ba, sdk.OpWrite},
			{b, a, rb, ra, ba, sdk.OpRead},
		} {
			scatter(e, dir.x, dir.y, dir.rx, dir.ry, dir.peer, dir.op, n, uint64(round))
			if e.t.Failed() {
				return
			}
		}
	},
}

// scatter posts one transfer of n descriptor pairs from agent x (region rx)
// with y (region ry) and checks every pair.
func scatter(e *env, x, y *agent, rx, ry *region, peer sdk.PeerID, op sdk.Op, n int, seed uint64) {
	e.t.Helper()
	rng := rand.New(rand.NewPCG(seed, 99))
	lens := make([]uint64, n)
	for i := range lens {
		lens[i] = 1 + uint64(rng.IntN(1500))
	}
	// Local descriptor k holds pair k; remote descriptor perm[k] holds it.
	perm := rng.Perm(n)
	inv := make([]int, n)
	for k, p := range perm {
		inv[p] = k
	}
	local := make([]sdk.Descriptor, n)
	remote := make([]sdk.Descriptor, n)
	var lo, ro uint64 = 1, 3
	for k := range n {
		local[k] = rx.desc(lo, lens[k])
		lo += lens[k] + uint64(rng.IntN(7))
	}
	for j := range n {
		k := inv[j]
		remote[j] = ry.desc(ro, lens[k])
		ro += lens[k] + uint64(rng.IntN(7))
	}
	ld, rd := x.dlist(0, local...), x.dlist(peer, remote...)
	li, ri := make([]uint32, n), make([]uint32, n)
	for i, k := range rng.Perm(n) {
		li[i], ri[i] = uint32(k), uint32(perm[k])
	}
	src, dst := rx, ry
	srcD, dstD := local, make([]sdk.Descriptor, n)
	for k := range n {
		dstD[k] = remote[perm[k]]
	}
	if op == sdk.OpRead {
		src, dst, srcD, dstD = ry, rx, dstD, srcD
	}
	wants := make([][]byte, n)
	for k := range n {
		wants[k] = pattern(seed<<20|uint64(k), lens[k])
		src.write(srcD[k].Offset, wants[k])
	}
	h := x.post(sdk.PostSpec{Op: op, Local: ld, LocalIndices: li, Remote: rd, RemoteIndices: ri})[0]
	if st := x.wait(h)[0]; st.State != sdk.StateDone {
		e.t.Fatalf("%v of %d descriptors by agent %q: ended %v (%v), want DONE", op, n, x.name, st.State, st.Reason)
	}
	for k := range n {
		if !expectBytes(dst, dstD[k].Offset, wants[k], fmt.Sprintf("%v by agent %q, descriptor pair %d of %d", op, x.name, k, n)) {
			break
		}
	}
	x.release(h)
	x.releaseDlists(ld, rd)
}

// checkSeveralPeers: one agent moves data with three peers at once while
// they write into it.
var checkSeveralPeers = check{
	name:  "data/several-peers",
	doc:   "one agent READs from and WRITEs to three peers in one batch while each peer WRITEs into it; every byte arrives",
	needs: needsRemote,
	run: func(e *env) {
		const slot = 1 << 20
		hub := e.agent()
		peers := []*agent{e.agent(), e.agent(), e.agent()}
		hr := hub.region(uint64(3 * len(peers) * slot))
		type move struct {
			by       *agent
			h        sdk.HandleID
			dst      *region
			off      uint64
			want     []byte
			describe string
		}
		var moves []move
		prs := make([]*region, len(peers))
		for i, p := range peers {
			prs[i] = p.region(2 * slot)
		}
		var hubPosts []sdk.PostSpec
		var hubMoves []move
		for i, p := range peers {
			pid := hub.loadPeer(p)
			back := p.loadPeer(hub)
			pr := prs[i]
			// hub WRITEs its slot 3i into the peer's slot 0.
			w := pattern(uint64(10+i), slot)
			hr.write(uint64(3*i)*slot, w)
			hubPosts = append(hubPosts, sdk.PostSpec{Op: sdk.OpWrite,
				Local: hub.dlist(0, hr.desc(uint64(3*i)*slot, slot)), LocalIndices: []uint32{0},
				Remote: hub.dlist(pid, pr.desc(0, slot)), RemoteIndices: []uint32{0}})
			hubMoves = append(hubMoves, move{dst: pr, off: 0, want: w, describe: "hub WRITE to " + p.name})
			// hub READs the peer's slot 1 into its slot 3i+1.
			r := pattern(uint64(20+i), slot)
			pr.write(slot, r)
			hubPosts = append(hubPosts, sdk.PostSpec{Op: sdk.OpRead,
				Local: hub.dlist(0, hr.desc(uint64(3*i+1)*slot, slot)), LocalIndices: []uint32{0},
				Remote: hub.dlist(pid, pr.desc(slot, slot)), RemoteIndices: []uint32{0}})
			hubMoves = append(hubMoves, move{dst: hr, off: uint64(3*i+1) * slot, want: r, describe: "hub READ from " + p.name})
			// The peer WRITEs its slot 1 into the hub's slot 3i+2.
			h := p.post(sdk.PostSpec{Op: sdk.OpWrite,
				Local: p.dlist(0, pr.desc(slot, slot)), LocalIndices: []uint32{0},
				Remote: p.dlist(back, hr.desc(uint64(3*i+2)*slot, slot)), RemoteIndices: []uint32{0}})[0]
			moves = append(moves, move{by: p, h: h, dst: hr, off: uint64(3*i+2) * slot, want: r, describe: p.name + " WRITE to hub"})
		}
		for i, h := range hub.post(hubPosts...) {
			hubMoves[i].by, hubMoves[i].h = hub, h
		}
		for _, m := range append(moves, hubMoves...) {
			if st := m.by.wait(m.h)[0]; st.State != sdk.StateDone {
				e.t.Errorf("%s: handle %d ended %v (%v), want DONE", m.describe, m.h, st.State, st.Reason)
				continue
			}
			expectBytes(m.dst, m.off, m.want, m.describe)
		}
	},
}

// needsRemote runs on transports that claim transfers between processes.
func needsRemote(d sdk.Description) string {
	if !d.Capabilities.Remote {
		return "transport does not claim Remote transfers"
	}
	return ""
}

// postCount is how many big transfers the post-never-waits check posts in
// one call.
const postCount = 8

// checkPostNeverWaits: Post returns while its transfers still run.
var checkPostNeverWaits = check{
	name:  "data/post-never-waits",
	doc:   "Post of 8 transfers of 64 MiB returns before they are all DONE: the first Poll after it finds one still IN_PROGRESS",
	needs: movesData,
	run: func(e *env) {
		l := e.link(bigTransfer)
		want := pattern(3, bigTransfer)
		l.src.write(0, want)
		specs := make([]sdk.PostSpec, postCount)
		for i := range specs {
			specs[i] = l.spec(sdk.OpWrite)
		}
		ids := l.a.post(specs...)
		running := 0
		for _, s := range l.a.poll(ids...) {
			if s.Err == nil && s.State == sdk.StateInProgress {
				running++
			}
		}
		if running == 0 {
			e.t.Errorf("the first Poll after Post of %d transfers of %d bytes found none IN_PROGRESS: Post must return at once, without waiting for bytes to move", postCount, bigTransfer)
		}
		for i, st := range l.a.wait(ids...) {
			if st.State != sdk.StateDone {
				e.t.Errorf("handle %d ended %v (%v), want DONE", ids[i], st.State, st.Reason)
			}
		}
		expectBytes(l.dst, 0, want, "after every handle was DONE")
	},
}
