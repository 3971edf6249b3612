package conformance

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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

// dataSlot is each worker's slot of the data checks' regions, for every
// case but the 64 MiB one, which has one slot of its own.
const dataSlot = 2 << 20

// checkDataSizes: byte-exact READ and WRITE of 1 B to 64 MiB at odd offsets,
// nothing outside the range touched.
var checkDataSizes = check{
	name: "data/sizes",
	doc: "READ and WRITE of 1 B to 64 MiB at odd offsets (one region registered at a non-zero file offset) move exactly the bytes asked, are complete when DONE is reported, and touch no byte around them: " +
		"every size both ways, then the sizes up to 1 MiB again, --repeat (default 100) transfers in all, 8 at once, each into a slot of its own; a transport breaking this one time in ten passes with probability 0.9^repeat",
	needs: movesData,
	run: func(e *env) {
		a, b := e.pair()
		big := uint64(bigTransfer + 2*4096)
		size := parallelWorkers*dataSlot + big
		ra := a.regions(regionSpec{size: size, base: 4096})[0]
		rb := b.region(size)
		peer := a.loadPeer(b)
		var bigMu sync.Mutex // one worker at a time in the 64 MiB slot
		every := 2 * len(dataCases)
		e.parallel(max(e.cfg.Repeat, every), func(t T, w, i int) {
			a := a.as(t)
			k := i % every
			if i >= every {
				k %= every - 2 // the 64 MiB case only once each way
			}
			c, op := dataCases[k/2], []sdk.Op{sdk.OpWrite, sdk.OpRead}[k%2]
			base := uint64(w) * dataSlot
			if c.size+c.from+guard > dataSlot || c.size+c.to+guard > dataSlot {
				bigMu.Lock()
				defer bigMu.Unlock()
				base = parallelWorkers * dataSlot
			}
			c.from, c.to = c.from+base, c.to+base
			ra, rb := ra.as(a), rb.as(a)
			from, to := ra, rb
			if op == sdk.OpRead {
				from, to = rb, ra
			}
			what := fmt.Sprintf("%v of %d bytes from offset %d to offset %d", op, c.size, c.from, c.to)
			want := pattern(uint64(i)<<8|uint64(op), c.size)
			from.write(c.from, want)
			lo := c.to - min(c.to-base, guard)
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
				t.Fatalf("%s: handle %d ended %v (%v), want DONE", what, h, st.State, st.Reason)
			}
			if !expectBytes(to, c.to, want, what+", as soon as DONE was reported") ||
				!expectBytes(to, lo, before[:c.to-lo], what+": bytes before the range") ||
				!expectBytes(to, c.to+c.size, before[c.to-lo+c.size:], what+": bytes after the range") {
				t.FailNow()
			}
			a.release(h)
			a.releaseDlists(ld, rd)
		})
	},
}

// manySlot is each worker's slot of the many-descriptors regions: 256
// descriptors of up to 1500 bytes with gaps of up to 6.
const manySlot = 512 << 10

// checkManyDescriptors: many descriptors per post, scattered and permuted,
// each pair moved exactly, initiated from both agents.
var checkManyDescriptors = check{
	name: "data/many-descriptors",
	doc: "a post of up to 256 descriptors of different lengths, its indices permuted, moves each pair exactly, for READ and WRITE, initiated by either agent: " +
		"--repeat (default 100) posts, 8 at once, each in a slot of its own; a transport misplacing a post one time in ten passes with probability 0.9^repeat",
	needs: movesData,
	run: func(e *env) {
		a, b := e.pair()
		n := 256
		for _, lim := range []uint32{e.desc.Limits.MaxDescriptorsPerList, e.desc.Limits.MaxDescriptorsPerPost} {
			if lim > 0 && int(lim) < n {
				n = int(lim)
			}
		}
		ra, rb := a.region(parallelWorkers*manySlot), b.region(parallelWorkers*manySlot)
		ab, ba := a.loadPeer(b), b.loadPeer(a)
		type dir struct {
			x, y   *agent
			rx, ry *region
			peer   sdk.PeerID
			op     sdk.Op
		}
		dirs := []dir{
			{a, b, ra, rb, ab, sdk.OpWrite},
			{a, b, ra, rb, ab, sdk.OpRead},
			{b, a, rb, ra, ba, sdk.OpWrite},
			{b, a, rb, ra, ba, sdk.OpRead},
		}
		e.parallel(max(e.cfg.Repeat, len(dirs)), func(t T, w, i int) {
			d := dirs[i%len(dirs)]
			x, y := d.x.as(t), d.y.as(t)
			scatter(x, y, d.rx.as(x), d.ry.as(y), d.peer, d.op, n, uint64(w)*manySlot, uint64(i))
		})
	},
}

// scatter posts one transfer of n descriptor pairs from agent x (region rx)
// with y (region ry), within the slot at base of each, and checks every
// pair.
func scatter(x, y *agent, rx, ry *region, peer sdk.PeerID, op sdk.Op, n int, base, seed uint64) {
	x.t.Helper()
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
	lo, ro := base+1, base+3
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
		x.t.Fatalf("%v of %d descriptors by agent %q: ended %v (%v), want DONE", op, n, x.name, st.State, st.Reason)
	}
	for k := range n {
		if !expectBytes(dst, dstD[k].Offset, wants[k], fmt.Sprintf("%v by agent %q, descriptor pair %d of %d", op, x.name, k, n)) {
			x.t.FailNow()
		}
	}
	x.release(h)
	x.releaseDlists(ld, rd)
}

// severalSlot is the size of each transfer of the several-peers check.
const severalSlot = 256 << 10

// checkSeveralPeers: one agent moves data with three peers at once while
// they write into it.
var checkSeveralPeers = check{
	name: "data/several-peers",
	doc: "one agent READs from and WRITEs to three peers in one batch while each peer WRITEs into it; every byte arrives: " +
		"rounds of 9 transfers, 4 rounds at once, until --repeat (default 100) transfers moved; a transport losing one in ten passes with probability 0.9^repeat",
	needs: needsRemote,
	run: func(e *env) {
		const slot = severalSlot
		const workers = 4
		hub := e.agent()
		peers := []*agent{e.agent(), e.agent(), e.agent()}
		// The hub's slots: per worker, 3 per peer; each peer's: per
		// worker, 2.
		hr := hub.region(uint64(workers * 3 * len(peers) * slot))
		prs := make([]*region, len(peers))
		toPeer := make([]sdk.PeerID, len(peers))
		toHub := make([]sdk.PeerID, len(peers))
		for i, p := range peers {
			prs[i] = p.region(workers * 2 * slot)
		}
		for i, p := range peers {
			toPeer[i] = hub.loadPeer(p)
			toHub[i] = p.loadPeer(hub)
		}
		perRound := 3 * len(peers)
		e.parallelOn(workers, (max(e.cfg.Repeat, perRound)+perRound-1)/perRound, func(t T, w, round int) {
			type move struct {
				by       *agent
				h        sdk.HandleID
				dst      *region
				off      uint64
				want     []byte
				describe string
				dlists   []sdk.DlistID
			}
			hub := hub.as(t)
			hr := hr.as(hub)
			var moves, hubMoves []move
			var hubPosts []sdk.PostSpec
			for i, p := range peers {
				p := p.as(t)
				pr := prs[i].as(p)
				hs := uint64((w*len(peers)+i)*3) * slot // the hub's 3 slots for peer i
				ps := uint64(w*2) * slot                // the peer's 2 slots
				seed := uint64(round)<<8 | uint64(i)<<2
				// hub WRITEs its slot hs into the peer's slot ps.
				wb := pattern(seed, slot)
				hr.write(hs, wb)
				ld, rd := hub.dlist(0, hr.desc(hs, slot)), hub.dlist(toPeer[i], pr.desc(ps, slot))
				hubPosts = append(hubPosts, sdk.PostSpec{Op: sdk.OpWrite, Local: ld, LocalIndices: []uint32{0}, Remote: rd, RemoteIndices: []uint32{0}})
				hubMoves = append(hubMoves, move{dst: pr, off: ps, want: wb, describe: "hub WRITE to " + p.name, dlists: []sdk.DlistID{ld, rd}})
				// hub READs the peer's slot ps+slot into its slot hs+slot.
				rb := pattern(seed|1, slot)
				pr.write(ps+slot, rb)
				ld, rd = hub.dlist(0, hr.desc(hs+slot, slot)), hub.dlist(toPeer[i], pr.desc(ps+slot, slot))
				hubPosts = append(hubPosts, sdk.PostSpec{Op: sdk.OpRead, Local: ld, LocalIndices: []uint32{0}, Remote: rd, RemoteIndices: []uint32{0}})
				hubMoves = append(hubMoves, move{dst: hr, off: hs + slot, want: rb, describe: "hub READ from " + p.name, dlists: []sdk.DlistID{ld, rd}})
				// The peer WRITEs its slot ps+slot into the hub's slot
				// hs+2*slot.
				ld, rd = p.dlist(0, pr.desc(ps+slot, slot)), p.dlist(toHub[i], hr.desc(hs+2*slot, slot))
				h := p.post(sdk.PostSpec{Op: sdk.OpWrite, Local: ld, LocalIndices: []uint32{0}, Remote: rd, RemoteIndices: []uint32{0}})[0]
				moves = append(moves, move{by: p, h: h, dst: hr, off: hs + 2*slot, want: rb, describe: p.name + " WRITE to hub", dlists: []sdk.DlistID{ld, rd}})
			}
			for i, h := range hub.post(hubPosts...) {
				hubMoves[i].by, hubMoves[i].h = hub, h
			}
			for _, m := range append(moves, hubMoves...) {
				if st := m.by.wait(m.h)[0]; st.State != sdk.StateDone {
					t.Fatalf("%s: handle %d ended %v (%v), want DONE", m.describe, m.h, st.State, st.Reason)
				}
				if !expectBytes(m.dst, m.off, m.want, m.describe) {
					t.FailNow()
				}
				m.by.release(m.h)
				m.by.releaseDlists(m.dlists...)
			}
		})
	},
}

// needsRemote runs on transports that claim transfers between processes.
func needsRemote(d sdk.Description) string {
	if !d.Capabilities.Remote {
		return "transport does not claim Remote transfers"
	}
	return ""
}

// A Release of a running handle that returns OK only once its transfer
// ended, taking as long as the transfer takes alone at the measured
// bandwidth, waited for it, or was stalled that long: a loaded machine
// stalls a process for 100 ms and more now and then. So at one size at
// least waitedMin such calls, and one in waitedShare, fail the check: a
// transport waiting one time in ten is caught (10 expected in 100, missed
// with probability 0.024), a stall here and there is not.
const (
	waitedMin   = 5
	waitedShare = 20
)

// postWaitPosts is how many Posts post-never-waits makes at each size.
const postWaitPosts = 20

// checkPostNeverWaits: Post returns while its transfer still runs.
var checkPostNeverWaits = check{
	name: "data/post-never-waits",
	doc: "Post returns before its transfer's bytes have landed: 20 WRITEs per size (fewer if --repeat is), 4 at once, sized from the measured bandwidth and doubled until 20 of them were found with half their bytes still to land when Post returned; " +
		"fails when, at one size, at least 5 and half the Posts returned only once every byte had landed, each taking as long as a transfer takes (alone at the measured bandwidth, or half the median from Post to DONE of the others), or at the cap however long they took when none returned early; " +
		"a Post waiting less often is not told from a loaded machine's stalls",
	needs: movesData,
	run: func(e *env) {
		a, b := e.pair()
		// A Post that returned only once every byte had landed, and took
		// as long as a transfer of its size takes, waited for it or was
		// stalled that long. Out of process, a starved machine stalls the
		// answer to a Post while the transport's other threads move its
		// bytes: UCX over tcp at a load of 10 on 2 cores did so for one
		// Post in four. So only a Post that waits at least half the time
		// is told from a stall, and only a transport whose Post does so fails.
		// A Post that moves a small transfer's bytes itself, as it
		// returns, is not held to it.
		canStop := e.desc.CancelEffect == sdk.CancelStops
		// Only a Post waiting half the time fails (above): postWaitPosts
		// per size tell that as well as --repeat would, at a fraction of
		// the bytes.
		n := min(e.cfg.Repeat, postWaitPosts)
		e.grow(a, b, "Post returning before its bytes land", n, func(f *flight) int {
			var posts, early, late atomic.Int64
			var mu sync.Mutex
			var lateTook, earlyDone []time.Duration
			e.parallelOn(flightWorkers, n, func(t T, w, _ int) {
				a := a.as(t)
				f.reset(t, w)
				asked := time.Now()
				h := a.post(f.spec(w))[0]
				took := time.Since(asked)
				// Right after Post returned: half the bytes still to come,
				// or every byte landed already?
				isEarly := f.farFromDone(t, w)
				switch {
				case isEarly:
					early.Add(1)
				case !f.unfinished(t, w):
					late.Add(1)
					mu.Lock()
					lateTook = append(lateTook, took)
					mu.Unlock()
				}
				posts.Add(1)
				// Once a few early ones told how long a transfer takes, an
				// early one has shown what it is here for: Cancel spares
				// the rest of its bytes (the data checks hold DONE to them).
				stop := false
				if isEarly && canStop {
					mu.Lock()
					stop = len(earlyDone) >= flightWorkers
					mu.Unlock()
				}
				if stop {
					cancelAll(e, a, []sdk.HandleID{h})
				}
				st := a.wait(h)[0]
				switch {
				case stop && st.State == sdk.StateFailed, !stop && st.State != sdk.StateDone:
					t.Fatalf("handle %d ended %v (%v), want DONE", h, st.State, st.Reason)
				case st.State == sdk.StateDone && f.unfinished(t, w):
					t.Fatalf("handle %d DONE, but the last bytes of its %d are not in place", h, f.n)
				}
				if isEarly && !stop {
					mu.Lock()
					earlyDone = append(earlyDone, time.Since(asked))
					mu.Unlock()
				}
				a.release(h)
			})
			p, k, l := posts.Load(), early.Load(), late.Load()
			// How long a transfer takes: alone at the measured bandwidth,
			// or half what the early ones took from Post to DONE (four
			// sharing the bandwidth), whichever is shorter: the bandwidth
			// probe, a single transfer polled to its end, may read low.
			whole := time.Duration(float64(f.n) / f.bw * float64(time.Second))
			if len(earlyDone) > 0 {
				slices.Sort(earlyDone)
				whole = min(whole, earlyDone[len(earlyDone)/2]/2)
			}
			slowest := time.Duration(0)
			if len(lateTook) > 0 {
				slowest = slices.Max(lateTook)
			}
			e.t.Logf("%d-byte WRITEs: %d Posts, %d returned with half the bytes to come, %d only once all landed, the slowest of those in %v (a transfer takes %v)",
				f.n, p, k, l, slowest, whole)
			waited := int64(0)
			for _, d := range lateTook {
				if d >= whole {
					waited++
				}
			}
			switch {
			case e.t.Failed():
			case waited >= waitedMin && 2*waited >= p:
				e.t.Errorf("%d of %d Posts of a %d-byte WRITE returned only once every byte had landed, each taking at least %v, as long as a transfer of that size takes: "+
					"Post waited for its transfer (Post never waits for bytes to move)", waited, p, f.n, whole)
			case f.n >= e.flightCap() && len(earlyDone) == 0 && l >= waitedMin && 2*l >= p:
				// Even the largest transfer had landed by the time half
				// the Posts returned, and none returned early to tell how
				// long a transfer takes: however fast the transport, Post
				// waited. Where some did, a Post that waited took as long
				// as they took to DONE (above): a late one that took less
				// was overtaken by the transport's other threads while its
				// caller was stalled after Post returned, as a loaded
				// machine does with 64 MiB over shared memory.
				e.t.Errorf("%d of %d Posts of a %d-byte WRITE (the cap) returned only once every byte had landed: "+
					"Post waited for its transfer (Post never waits for bytes to move)", l, p, f.n)
			}
			return int(k)
		})
	},
}
