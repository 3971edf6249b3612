package core

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/custody-dev/custody/sdk"
)

// TestOwnershipProperties drives random requests, peer removals and
// reconnections, consumer notifications, rounds and injected faults through
// the in-process fake and checks after every step that:
//   - no block held by the engine, or reassigned to another request, is
//     reachable by a live handle;
//   - no handle was released before the transport reported it terminal;
//   - each request has at most one terminal report;
//
// and at the end, once drained, that every request had exactly one report
// and every native resource count is back to zero.
func TestOwnershipProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		dir, err := os.MkdirTemp("", "core-prop-*")
		require.NoError(rt, err)
		defer os.RemoveAll(dir)
		ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
		defer cancel()

		faults := []string{}
		for _, f := range []string{"fail,prob=0.15", "disconnect,prob=0.05", "release-fail,prob=0.2,count=2", "poll-fail,prob=0.2,count=2", "stall,prob=0.2,for=5ms"} {
			if rapid.Bool().Draw(rt, "fault "+f) {
				faults = append(faults, f)
			}
		}
		seed := rapid.Uint64Range(1, 1<<20).Draw(rt, "seed")
		noEvents := rapid.Bool().Draw(rt, "poll instead of events")
		r := openRig(rt, ctx, dir, rigOpts{
			local:  strings.Join(faults, ";"),
			params: map[string]string{"seed": fmt.Sprint(seed)},
			cfg:    Config{Batch: rapid.IntRange(0, 3).Draw(rt, "batch")},
			setup: func(s *spy) {
				s.cancelNone = rapid.Bool().Draw(rt, "cancel none")
			},
		})
		if noEvents {
			r.c.events = nil // the fallback: poll every live handle
		}
		m := &model{r: r, issued: map[RequestID]bool{}}
		done := false
		defer func() {
			if !done {
				// rapid ended the case early (a failure, or a data overrun it
				// discards): release everything without asserting, so no
				// agent outlives the case, then let rapid carry on.
				v := recover()
				m.abandon()
				if v != nil {
					panic(v)
				}
			}
		}()
		r.connect("p")
		m.connected = true
		steps := rapid.IntRange(1, 40).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			switch op := rapid.IntRange(0, 9).Draw(rt, "op"); op {
			case 0, 1:
				m.read(rt, rapid.IntRange(1, 2).Draw(rt, "parts"), rapid.Bool().Draw(rt, "notify"))
			case 2:
				m.write(rt, rapid.IntRange(1, 2).Draw(rt, "parts"))
			case 3:
				m.expectSend(rt)
			case 4:
				m.notify(rt)
			case 5:
				if m.connected {
					require.NoError(rt, r.c.RemovePeer(r.ctx, r.now, "p"))
				} else {
					r.connect("p")
				}
				m.connected = !m.connected
			default:
				r.now = r.now.Add(time.Duration(rapid.IntRange(0, 2000).Draw(rt, "ms")) * time.Millisecond)
				m.round()
			}
			m.check()
		}
		m.drain()
		done = true
	})
}

// model is what the property test remembers: the requests it issued.
type model struct {
	r         *rig
	n         int
	issued    map[RequestID]bool
	sends     []RequestID
	connected bool
}

func (m *model) id(kind string) RequestID {
	m.n++
	id := RequestID(fmt.Sprintf("%s%d", kind, m.n))
	m.issued[id] = true
	return id
}

// blocks takes n engine blocks, or reports that too few are free.
func (m *model) blocks(n int) ([]uint32, bool) {
	b, err := m.r.c.Alloc(m.r.pool, n)
	return b, err == nil
}

func (m *model) parts(t *rapid.T, n int) ([]Part, bool) {
	var parts []Part
	for k := 0; k < n; k++ {
		b, ok := m.blocks(1)
		if !ok {
			return nil, false
		}
		parts = append(parts, Part{Pool: m.r.pool, Local: b, Rank: k, Remote: []uint32{uint32(rapid.IntRange(0, nBlocks-1).Draw(t, "remote"))}})
	}
	return parts, true
}

func (m *model) read(t *rapid.T, n int, notify bool) {
	parts, ok := m.parts(t, n)
	if !ok {
		return
	}
	require.NoError(t, m.r.c.Read(m.r.ctx, m.r.now, ReadSpec{Request: m.id("r"), Peer: "p", Parts: parts, NotifyProducer: notify}))
}

func (m *model) write(t *rapid.T, n int) {
	parts, ok := m.parts(t, n)
	if !ok {
		return
	}
	id := m.id("w")
	require.NoError(t, m.r.c.Write(m.r.ctx, m.r.now, WriteSpec{Request: id, Peer: "p", Parts: parts, Consumers: n, Lease: 10 * time.Second}))
	m.sends = append(m.sends, id)
}

func (m *model) expectSend(t *rapid.T) {
	b, ok := m.blocks(rapid.IntRange(1, 2).Draw(t, "send blocks"))
	if !ok {
		return
	}
	id := m.id("s")
	require.NoError(t, m.r.c.ExpectSend(m.r.now, SendSpec{Request: id, Pool: m.r.pool, Blocks: b, Consumers: 1, Lease: 10 * time.Second}))
	m.sends = append(m.sends, id)
}

func (m *model) notify(t *rapid.T) {
	if len(m.sends) == 0 {
		return
	}
	id := m.sends[rapid.IntRange(0, len(m.sends)-1).Draw(t, "send")]
	m.r.notifyBack(rapid.IntRange(0, 1).Draw(t, "consumer"), id)
}

// round runs one Poll and gives reported blocks back to the free set, so
// later requests reuse them.
func (m *model) round() {
	rd := m.r.poll()
	m.recycle(rd)
}

func (m *model) recycle(Ready) {
	var back []uint32
	p := m.r.c.pools[m.r.pool-1]
	for b, o := range p.owner {
		if o == OwnerEngine {
			back = append(back, uint32(b))
		}
	}
	require.NoError(m.r.t, m.r.c.Free(m.r.pool, back))
}

// check asserts the invariants that hold after every step.
func (m *model) check() {
	t, c := m.r.t, m.r.c
	holder := map[BlockRef]RequestID{}
	for _, r := range c.reqs {
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
	for _, x := range c.live {
		for _, b := range x.local() {
			ref := BlockRef{x.pool, b}
			o := c.Owner(ref)
			require.Contains(t, []Owner{OwnerTransfer, OwnerRetained}, o, "live handle %v reaches %v held by %v", x.ref, ref, o)
			require.Equal(t, x.req.id, holder[ref], "live handle %v reaches %v reassigned", x.ref, ref)
			require.False(t, x.req.flags&rReported != 0, "live handle %v of a reported request", x.ref)
		}
	}
	for ref, id := range holder {
		require.Contains(t, []Owner{OwnerTransfer, OwnerRetained, OwnerQuarantined}, c.Owner(ref), "block %v of unreported request %q", ref, id)
	}
	m.r.tr.mu.Lock()
	early := slices.Clone(m.r.tr.releasedEarly)
	m.r.tr.mu.Unlock()
	require.Empty(t, early, "handles released before the transport reported them terminal")
}

// drain ends every request (removing the peer, expiring leases), checks that
// each had exactly one report and that the agent holds only the pool, then
// closes the Core.
func (m *model) drain() {
	r := m.r
	if m.connected || r.c.Stats().Waiting > 0 {
		require.NoError(r.t, r.c.RemovePeer(r.ctx, r.now, "p"))
	}
	r.now = r.now.Add(time.Minute)
	r.until("every request reported", func(rd Ready) bool {
		m.recycle(rd)
		m.check()
		return r.c.Stats().Requests == 0 && r.c.Stats().Live == 0 && r.c.Stats().RetiredPeers == 0
	})
	for id := range m.issued {
		require.Equal(r.t, 1, r.seen[id], "request %q reports", id)
	}
	res, err := r.tr.Resources(r.ctx)
	require.NoError(r.t, err)
	require.Equal(r.t, sdk.Resources{Regions: 1, Dlists: 1}, res, "only the pool may remain before Close")
	require.NoError(r.t, r.c.Close(r.ctx, r.now))
	r.shutdown()
}

// abandon releases everything best-effort, asserting nothing: removing the
// peer, expiring every lease and closing the Core, then the remote agents.
func (m *model) abandon() {
	r := m.r
	_ = r.c.RemovePeer(r.ctx, r.now, "p")
	r.now = r.now.Add(time.Minute)
	deadline := time.Now().Add(wait)
	for r.c.Close(r.ctx, r.now) != nil && time.Now().Before(deadline) {
		r.c.Poll(r.ctx, r.now)
		time.Sleep(time.Millisecond) // pacing of the poll loop, not synchronisation
	}
	for _, rm := range r.remotes {
		if rm.back != 0 {
			_, _ = rm.tr.UnloadPeers(r.ctx, []sdk.PeerID{rm.back})
		}
		_, _ = rm.tr.DeregisterMemory(r.ctx, []sdk.RegionID{rm.region})
		_ = rm.tr.Close(r.ctx)
	}
}
