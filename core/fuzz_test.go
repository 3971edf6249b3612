package core

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// FuzzCoreOps decodes bytes into a sequence of operations on a Core over
// the scripted double (requests of every kind, notifications, handle
// outcomes, injected call failures, rounds, time, peer removal, transport
// deaths) and checks core's invariants after every step:
//   - no block a transfer may still touch (a handle of a live transport not
//     yet terminal) is back with the engine or free;
//   - no block is held by two requests, and a live handle reaches only
//     blocks of its own unreported request;
//   - no request is reported twice;
//
// and at the end, once everything drained, that every request issued was
// reported exactly once. The host's part is played as the host plays it:
// an epoch core asks to fence is killed and a fresh transport attached.
// The seed corpus (testdata/fuzz/FuzzCoreOps) runs as a plain test.
func FuzzCoreOps(f *testing.F) {
	f.Add([]byte{0, 1, 1, 0, 7, 0, 9, 0})
	f.Add([]byte{0x40, 0x12, 0, 1, 1, 1, 2, 1, 3, 0, 4, 1, 5, 0, 6, 1, 7, 1, 7, 2, 9, 0, 10, 3, 9, 0})
	f.Add([]byte{0x21, 0x05, 0, 0, 1, 0, 8, 0x13, 1, 1, 9, 0, 12, 0, 9, 0, 1, 1, 7, 0, 9, 0})
	f.Add([]byte{0x13, 0x30, 0, 1, 2, 0, 4, 1, 6, 0, 6, 1, 11, 0, 9, 0, 10, 9, 9, 0, 13, 0})
	f.Add([]byte{0x8c, 0x03, 0, 1, 1, 2, 8, 0x41, 1, 1, 10, 40, 9, 0, 9, 0, 12, 0, 0, 0, 3, 1, 5, 2, 9, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 400 {
			ops = ops[:400] // a case is a short story: long ones only slow the search
		}
		fz := newFuzzRig(t, ops)
		for len(fz.in) >= 2 {
			op, arg := fz.in[0], fz.in[1]
			fz.in = fz.in[2:]
			fz.step(op, arg)
			fz.check()
		}
		fz.drain()
	})
}

// fuzzRig is a srig with what the fuzz target remembers: the requests
// issued, and the local blocks each posted handle touches.
type fuzzRig struct {
	*srig
	in      []byte
	n       int
	issued  []RequestID
	sends   []RequestID // sends and receives, for notifications
	recvs   []RequestID
	touches map[Epoch]map[sdk.HandleID][]uint32
	mod     func(d *double)
	epoch   Epoch
	peerUp  bool
}

// newFuzzRig reads the configuration from the first two bytes: hold cap,
// escalation policy, fence scope, events, what Cancel does, batch size.
func newFuzzRig(t *testing.T, in []byte) *fuzzRig {
	var a, b byte
	if len(in) >= 2 {
		a, b, in = in[0], in[1], in[2:]
	}
	cfg := Config{HoldCap: time.Duration(1+a%8) * time.Second, Batch: int(b % 4)}
	if a&0x80 != 0 {
		cfg.Escalation = EscalateQuarantine // release-and-reuse is unsafe by design: never fuzzed
	}
	mod := func(d *double) {
		if a&0x10 != 0 {
			d.desc.FenceScope = sdk.FenceInitiated
		}
		d.desc.Capabilities.Events = a&0x20 != 0
		switch (b >> 4) % 3 {
		case 1:
			d.cancelTo = sdk.StateCanceled
		case 2:
			d.cancelTo = sdk.StateFailed
		}
	}
	fz := &fuzzRig{in: in, touches: map[Epoch]map[sdk.HandleID][]uint32{}, mod: mod, epoch: 1}
	fz.srig = newSrig(t, cfg, mod)
	fz.tamper = fz.record
	return fz
}

// record notes, for every handle a Post gave, the pool blocks it touches
// (the pool's dlist has one descriptor per block, in order).
func (fz *fuzzRig) record(w Work, res *Result) {
	if w.Kind != WorkPost {
		return
	}
	m := fz.touches[w.Epoch]
	if m == nil {
		m = map[sdk.HandleID][]uint32{}
		fz.touches[w.Epoch] = m
	}
	for k, p := range res.Posts {
		if p.Err == nil && p.ID != 0 && k < len(w.Posts) {
			m[p.ID] = slices.Clone(w.Posts[k].LocalIndices)
		}
	}
}

func (fz *fuzzRig) id(kind string) RequestID {
	fz.n++
	return RequestID(fmt.Sprintf("%s%d", kind, fz.n))
}

// alloc takes n blocks, or none when the pool has too few free.
func (fz *fuzzRig) alloc(n int) ([]uint32, bool) {
	b, err := fz.c.Alloc(fz.pool, n)
	return b, err == nil
}

func (fz *fuzzRig) parts(n int) ([]Part, bool) {
	var parts []Part
	for k := range n {
		b, ok := fz.alloc(1)
		if !ok {
			if len(parts) > 0 {
				var back []uint32
				for _, p := range parts {
					back = append(back, p.Local...)
				}
				require.NoError(fz.t, fz.c.Free(fz.pool, back))
			}
			return nil, false
		}
		parts = append(parts, Part{Pool: fz.pool, Local: b, Rank: k, Remote: []uint32{uint32(k)}})
	}
	return parts, true
}

// issue records a request the Core accepted; one it refused gives its
// blocks back.
func (fz *fuzzRig) issue(id RequestID, err error, blocks []uint32) bool {
	if err != nil {
		require.NoError(fz.t, fz.c.Free(fz.pool, blocks))
		return false
	}
	fz.issued = append(fz.issued, id)
	return true
}

func partBlocks(parts []Part) []uint32 {
	var out []uint32
	for _, p := range parts {
		out = append(out, p.Local...)
	}
	return out
}

// step runs one operation.
func (fz *fuzzRig) step(op, arg byte) {
	s := fz.srig
	switch op % 14 {
	case 0: // connect the peer of one or two ranks (again, after a removal)
		if !fz.peerUp {
			if err := s.c.ConnectPeer(peerSpec("p", 1+int(arg%2))); err == nil {
				fz.peerUp = true
			}
			s.settle()
		}
	case 1: // read
		parts, ok := fz.parts(1 + int(arg%2))
		if !ok {
			return
		}
		id := fz.id("r")
		err := s.c.Read(s.now, ReadSpec{Request: id, Token: tok(id), Peer: "p", Parts: parts, NotifyProducer: arg&4 != 0})
		fz.issue(id, err, partBlocks(parts))
		s.settle()
	case 2: // write
		parts, ok := fz.parts(1 + int(arg%2))
		if !ok {
			return
		}
		id := fz.id("w")
		err := s.c.Write(s.now, WriteSpec{Request: id, Token: tok(id), Peer: "p", Parts: parts, Consumers: 1 + int(arg>>2)%2, Lease: time.Duration(1+arg%16) * time.Second})
		if fz.issue(id, err, partBlocks(parts)) {
			fz.sends = append(fz.sends, id)
		}
		s.settle()
	case 3: // expect send
		b, ok := fz.alloc(1 + int(arg%2))
		if !ok {
			return
		}
		id := fz.id("s")
		err := s.c.ExpectSend(s.now, SendSpec{Request: id, Token: tok(id), Peer: "p", Pool: s.pool, Blocks: b, Consumers: 1 + int(arg>>2)%2, Lease: time.Duration(1+arg%16) * time.Second})
		if fz.issue(id, err, b) {
			fz.sends = append(fz.sends, id)
		}
		s.settle()
	case 4: // expect receive
		b, ok := fz.alloc(1 + int(arg%2))
		if !ok {
			return
		}
		id := fz.id("v")
		err := s.c.ExpectReceive(s.now, RecvSpec{Request: id, Token: tok(id), Peer: "p", Pool: s.pool, Blocks: b, Producers: 1 + int(arg>>2)%2, Lease: time.Duration(1+arg%16) * time.Second})
		if fz.issue(id, err, b) {
			fz.recvs = append(fz.recvs, id)
		}
		s.settle()
	case 5: // a consumer's consumed notification for a send
		if len(fz.sends) > 0 {
			id := fz.sends[int(arg>>1)%len(fz.sends)]
			fz.d.inbox = append(fz.d.inbox, sdk.Notification{From: fmt.Sprintf("p%d", arg%2), Message: ConsumedMessage(id, tok(id))})
		}
	case 6: // a producer's written notification for a receive
		if len(fz.recvs) > 0 {
			id := fz.recvs[int(arg>>1)%len(fz.recvs)]
			fz.d.inbox = append(fz.d.inbox, sdk.Notification{From: fmt.Sprintf("p%d", arg%2), Message: WrittenMessage(id, tok(id))})
		}
	case 7: // a live handle turns terminal
		hs := fz.d.live()
		if len(hs) == 0 {
			return
		}
		h := hs[int(arg>>2)%len(hs)]
		if fz.d.handles[h].Terminal() {
			return
		}
		st := []sdk.State{sdk.StateDone, sdk.StateFailed, sdk.StateCanceled, sdk.StateDone}[arg%4]
		var reason error
		if st != sdk.StateDone {
			reason = sdk.Errorf(sdk.CodeBackend, "double: handle %d ended %v", h, st)
		}
		fz.d.set(h, st, reason)
	case 8: // the next call of a kind fails, as a whole or in one item
		kinds := []WorkKind{WorkPost, WorkPoll, WorkEvents, WorkRelease, WorkCancel, WorkSendNotifications, WorkNotifications,
			WorkLoadPeers, WorkUnloadPeers, WorkPrepareDescriptors, WorkReleaseDescriptors, WorkRegisterMemory, WorkDeregisterMemory}
		k := kinds[int(arg)%len(kinds)]
		codes := []sdk.Code{sdk.CodeBackend, sdk.CodeTimeout, sdk.CodeRemoteDisconnect, sdk.CodeBusy, sdk.CodeNotFound}
		code := codes[int(arg>>4)%len(codes)]
		if arg&0x80 != 0 {
			fz.d.failWhole(k, sdk.Errorf(code, "double: injected %v", code), 1)
			fz.d.faults[len(fz.d.faults)-1].applied = arg&0x40 != 0
		} else {
			fz.d.failItem(k, int(arg>>6)%2, sdk.Errorf(code, "double: injected %v", code), 1)
		}
	case 9: // a round
		fz.round()
	case 10: // time passes
		s.now = s.now.Add(time.Duration(arg) * 100 * time.Millisecond)
	case 11: // the engine removes the peer (or one it never connected)
		_ = s.c.RemovePeer(s.now, "p")
		s.settle()
		fz.peerUp = false
	case 12: // the transport process dies; the host attaches a new one
		fz.restart()
	case 13: // the engine frees what came back to it
		fz.recycle()
	}
}

// round runs a round and plays the host: an epoch to fence is killed and
// replaced, and the engine reuses the blocks that came back.
func (fz *fuzzRig) round() {
	rd := fz.poll()
	if slices.Contains(rd.Fence, fz.epoch) {
		fz.restart()
	}
	if arg := len(rd.FinishedSending) + len(rd.FinishedReceiving) + len(rd.Failed); arg > 0 {
		fz.recycle()
	}
}

// restart kills the attached epoch and attaches the next, as the host does
// when its transport process died or was fenced.
func (fz *fuzzRig) restart() {
	fz.kill(fz.epoch)
	fz.epoch++
	fz.attach(fz.epoch, fz.mod)
}

// recycle gives every block the engine holds back to the free set.
func (fz *fuzzRig) recycle() {
	var back []uint32
	p := fz.c.pools[fz.pool-1]
	for b, o := range p.owner {
		if o == OwnerEngine {
			back = append(back, uint32(b))
		}
	}
	require.NoError(fz.t, fz.c.Free(fz.pool, back))
}

// checkHolders asserts what holds of c after every step whatever drives it:
// no block is held by two requests, and every live handle reaches only
// blocks of its own unreported request, held for a transfer. It returns
// the request that holds each block.
func checkHolders(t require.TestingT, c *Core) map[BlockRef]RequestID {
	holder := map[BlockRef]RequestID{}
	for r := range c.reqs.all() {
		for i := range r.xs {
			for _, b := range r.xs[i].local() {
				ref := BlockRef{r.xs[i].pool, b}
				if other, ok := holder[ref]; ok {
					require.Failf(t, "block shared", "%v held by requests %q and %q", ref, other, r.id)
				}
				holder[ref] = r.id
			}
		}
	}
	for x := range c.live.all() {
		for _, b := range x.local() {
			ref := BlockRef{x.pool, b}
			o := c.Owner(ref)
			require.Contains(t, []Owner{OwnerTransfer, OwnerRetained}, o, "live handle %v reaches %v held by %v", x.ref, ref, o)
			require.Equal(t, x.req.id, holder[ref], "live handle %v reaches %v of another request", x.ref, ref)
			require.Zero(t, x.req.flags&rReported, "live handle %v of a reported request", x.ref)
		}
	}
	return holder
}

// check asserts the invariants that hold after every step.
func (fz *fuzzRig) check() {
	t, c := fz.t, fz.c
	checkHolders(t, c)
	for e, d := range fz.ds {
		if fz.dead[e] {
			continue // its process is gone: its transfers touch nothing
		}
		for h, st := range d.handles {
			if st.Terminal() {
				continue
			}
			for _, b := range fz.touches[e][h] {
				o := c.Owner(BlockRef{fz.pool, b})
				require.Contains(t, []Owner{OwnerTransfer, OwnerRetained, OwnerQuarantined}, o,
					"block %d is %v while handle %d of epoch %d still moves bytes into it", b, o, h, e)
			}
		}
	}
}

// drain ends everything the way a host going down does: the peer removed,
// every running handle ended, leases expired, fences carried out; then
// every request issued must have had exactly one report.
func (fz *fuzzRig) drain() {
	s := fz.srig
	for i := range 200 {
		st := s.c.Stats()
		if st.Requests == 0 && st.Live == 0 && st.RetiredPeers == 0 && st.Journal == 0 {
			break
		}
		if i > 5 && st.Requests == 0 && st.Live == 0 {
			// Only native resources of leaked handles or a removed peer
			// are left: the host ends its transport process at shutdown.
			fz.restart()
		}
		fz.d.faults = nil
		_ = s.c.RemovePeer(s.now, "p") // also fails requests waiting for a peer never connected
		s.settle()
		fz.peerUp = false
		for _, h := range fz.d.live() {
			if !fz.d.handles[h].Terminal() {
				fz.d.set(h, sdk.StateFailed, sdk.Errorf(sdk.CodeRemoteDisconnect, "double: peer gone"))
			}
		}
		s.now = s.now.Add(time.Minute)
		fz.round()
		fz.check()
	}
	fz.round() // reports the last commands left with the rig
	st := s.c.Stats()
	require.True(fz.t, st.Requests == 0 && st.Live == 0 && st.RetiredPeers == 0 && st.Journal == 0, "not drained: %+v", st)
	for _, id := range fz.issued {
		require.Equal(fz.t, 1, s.seen[id], "request %q reports", id)
	}
}
