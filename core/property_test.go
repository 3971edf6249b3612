package core

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/custody-dev/custody/plugins/fake"
	"github.com/custody-dev/custody/sdk"
)

// TestOwnershipProperties drives random requests (reads, writes, sends and
// push receives, whose producers are the remote agents writing into our
// pool and notifying on DONE), peer removals and reconnections, consumer
// notifications, rounds and injected faults through the in-process fake and
// checks after every step that:
//   - no block held by the engine, or reassigned to another request, is
//     reachable by a live handle, nor by a producer's write still running;
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
		var remote map[int]string
		if rapid.Bool().Draw(rt, "producer faults") {
			f := "stall,prob=0.3,for=20ms;fail,prob=0.15;notif-drop,prob=0.1"
			remote = map[int]string{0: f, 1: f}
		}
		r := openRig(rt, ctx, dir, rigOpts{
			// Initiated-only fences: a failed push receive quarantines its
			// blocks rather than asking for a fence this test cannot give.
			fence:  "initiated",
			remote: remote,
			local:  strings.Join(faults, ";"),
			params: map[string]string{"seed": fmt.Sprint(seed)},
			cfg:    Config{Batch: rapid.IntRange(0, 3).Draw(rt, "batch")},
			setup: func(s *spy) {
				s.cancelNone = rapid.Bool().Draw(rt, "cancel none")
			},
		})
		if noEvents {
			r.c.events = false // the fallback: poll every live handle
		}
		m := &model{r: r, issued: map[RequestID]bool{}, inc: map[RequestID]*incarnation{}, pdl: map[int][2]sdk.DlistID{}, touched: map[RequestID]bool{}}
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
			switch op := rapid.IntRange(0, 11).Draw(rt, "op"); op {
			case 11:
				m.reuse(rt)
			case 10:
				m.receive(rt, m.id("v"))
			case 0, 1:
				m.read(rt, rapid.IntRange(1, 2).Draw(rt, "parts"), rapid.Bool().Draw(rt, "notify"))
			case 2:
				m.write(rt, rapid.IntRange(1, 2).Draw(rt, "parts"))
			case 3:
				m.expectSend(rt, m.id("s"))
			case 4:
				m.notify(rt)
			case 5:
				if m.connected {
					require.NoError(rt, r.removePeer("p"))
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
	pushes    []push                 // producers' writes into our pool, until released
	pdl       map[int][2]sdk.DlistID // per remote rank: its local dlist, its dlist of our pool
	inc       map[RequestID]*incarnation
	// touched: ids some notification was sent for. Delivery is
	// asynchronous, so one may still be in flight when the id is reused;
	// core cannot tell it from the new request's (ids carry no generation,
	// see core/doc.go), so reuse picks only untouched ids. Late
	// notifications that arrive before the reuse are
	// TestLateNotificationNeverFinishesAReusedID's.
	touched map[RequestID]bool
}

// incarnation is what the model knows of a send or receive not reported
// yet: when it was registered, how many distinct ranks must notify it, and
// which did since it was registered (for a receive: which producers
// posted their write). Notifications from before (late ones of an earlier
// request under the same id) must not count.
type incarnation struct {
	at   time.Time
	need int
	from map[int]bool
}

func (m *model) registered(id RequestID, need int) *incarnation {
	inc := &incarnation{at: m.r.now, need: need, from: map[int]bool{}}
	m.inc[id] = inc
	return inc
}

// push is one write a remote rank posted into our pool for a receive.
type push struct {
	id     RequestID
	k      int
	h      sdk.HandleID
	blocks []uint32
}

// id names a new request; it is issued once registered.
func (m *model) id(kind string) RequestID {
	m.n++
	return RequestID(fmt.Sprintf("%s%d", kind, m.n))
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
	id := m.id("r")
	require.NoError(t, m.r.read(ReadSpec{Request: id, Token: tok(id), Peer: "p", Parts: parts, NotifyProducer: notify}))
	m.issued[id] = true
}

func (m *model) write(t *rapid.T, n int) {
	parts, ok := m.parts(t, n)
	if !ok {
		return
	}
	id := m.id("w")
	require.NoError(t, m.r.write(WriteSpec{Request: id, Token: tok(id), Peer: "p", Parts: parts, Consumers: n, Lease: 10 * time.Second}))
	m.issued[id] = true
	m.registered(id, n)
	m.sends = append(m.sends, id)
}

func (m *model) expectSend(t *rapid.T, id RequestID) bool {
	b, ok := m.blocks(rapid.IntRange(1, 2).Draw(t, "send blocks"))
	if !ok {
		return false
	}
	require.NoError(t, m.r.c.ExpectSend(m.r.now, SendSpec{Request: id, Token: tok(id), Pool: m.r.pool, Blocks: b, Consumers: 1, Lease: 10 * time.Second}))
	m.issued[id] = true
	m.registered(id, 1)
	m.sends = append(m.sends, id)
	return true
}

// receive expects a push of one or two blocks from one or two producer
// ranks, each of which writes (or, drawn, never does) its share and
// notifies on DONE with the written notification.
func (m *model) receive(t *rapid.T, id RequestID) bool {
	if !m.connected {
		return false
	}
	n := rapid.IntRange(1, 2).Draw(t, "producers")
	b, ok := m.blocks(rapid.IntRange(1, 2).Draw(t, "receive blocks"))
	if !ok {
		return false
	}
	r := m.r
	require.NoError(t, r.c.ExpectReceive(r.now, RecvSpec{Request: id, Token: tok(id), Peer: "p", Pool: r.pool, Blocks: b, Producers: n, Lease: 10 * time.Second}))
	m.issued[id] = true
	inc := m.registered(id, n)
	for k := 0; k < n; k++ {
		if rapid.IntRange(0, 9).Draw(t, "producer lost") == 0 {
			continue
		}
		share := b[k%len(b) : k%len(b)+1]
		if n == 1 {
			share = b
		}
		dl := m.producerDlists(k)
		rm := r.remotes[k]
		res, err := rm.tr.Post(r.ctx, []sdk.PostSpec{{Op: sdk.OpWrite, Local: dl[0], LocalIndices: share, Remote: dl[1], RemoteIndices: share, Notification: WrittenMessage(id, tok(id))}})
		require.NoError(t, err)
		require.NoError(t, res[0].Err)
		m.pushes = append(m.pushes, push{id: id, k: k, h: res[0].ID, blocks: share})
		m.touched[id] = true
		inc.from[k] = true
	}
	return true
}

// reuse issues a send or receive again under the id of one already
// reported, as an engine may; the second must get exactly one report of
// its own.
func (m *model) reuse(t *rapid.T) {
	var done []RequestID
	for id := range m.issued {
		if (id[0] == 's' || id[0] == 'v') && m.r.seen[id] == 1 && !m.touched[id] {
			done = append(done, id)
		}
	}
	if len(done) == 0 {
		return
	}
	slices.Sort(done)
	id := done[rapid.IntRange(0, len(done)-1).Draw(t, "reused")]
	var ok bool
	if id[0] == 's' {
		ok = m.expectSend(t, id)
	} else {
		ok = m.receive(t, id)
	}
	if ok {
		m.r.seen[id] = 0 // reports come from Poll only: it gets exactly one again
	}
}

// producerDlists prepares, once, remote rank k's dlist of its own region
// and its dlist of our pool.
func (m *model) producerDlists(k int) [2]sdk.DlistID {
	if dl, ok := m.pdl[k]; ok {
		return dl
	}
	r := m.r
	rm := r.loadBack(k)
	region, _, err := r.c.PoolRegion(r.pool)
	require.NoError(r.t, err)
	descs := func(region sdk.RegionID) []sdk.Descriptor {
		out := make([]sdk.Descriptor, nBlocks)
		for i := range out {
			out[i] = sdk.Descriptor{Region: region, Offset: uint64(i) * blockSize, Length: blockSize}
		}
		return out
	}
	res, err := rm.tr.PrepareDescriptors(r.ctx, []sdk.DlistSpec{{Descriptors: descs(rm.region)}, {Peer: rm.back, Descriptors: descs(region)}})
	require.NoError(r.t, err)
	require.NoError(r.t, res[0].Err)
	require.NoError(r.t, res[1].Err)
	dl := [2]sdk.DlistID{res[0].ID, res[1].ID}
	m.pdl[k] = dl
	return dl
}

// settlePushes releases the producers' writes that ended, and returns how
// many still run (or could not be polled or released: they count as
// running). It asserts nothing, so abandon can use it.
func (m *model) settlePushes() int {
	r := m.r
	out := m.pushes[:0]
	for _, p := range m.pushes {
		tr := r.remotes[p.k].tr
		st, err := tr.Poll(r.ctx, []sdk.HandleID{p.h})
		if err == nil && st[0].Err == nil && st[0].State.Terminal() {
			if errs, err := tr.Release(r.ctx, []sdk.HandleID{p.h}); err == nil && errs[0] == nil {
				continue
			}
		}
		out = append(out, p)
	}
	m.pushes = out
	return len(out)
}

// awaitWake waits until one of trs wakes (a handle of it may have turned
// terminal) or deadline passes. A wake-up that came before the caller last
// polled is still in its channel, so none is missed; a spurious one costs a
// poll.
func awaitWake(trs []*fake.Transport, deadline time.Time) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)}}
	for _, tr := range trs {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(tr.Wake())})
	}
	reflect.Select(cases)
}

// releaseProducers waits for every producer write to end, best effort
// within wait, and releases them and the producers' dlists.
func (m *model) releaseProducers() {
	deadline := time.Now().Add(wait)
	for m.settlePushes() > 0 && time.Now().Before(deadline) {
		var trs []*fake.Transport
		for _, p := range m.pushes {
			trs = append(trs, m.r.remotes[p.k].tr)
		}
		awaitWake(trs, deadline)
	}
	for k, dl := range m.pdl {
		_, _ = m.r.remotes[k].tr.ReleaseDescriptors(m.r.ctx, []sdk.DlistID{dl[1], dl[0]})
	}
	m.pdl = map[int][2]sdk.DlistID{}
}

func (m *model) notify(t *rapid.T) {
	if len(m.sends) == 0 {
		return
	}
	id := m.sends[rapid.IntRange(0, len(m.sends)-1).Draw(t, "send")]
	k := rapid.IntRange(0, 1).Draw(t, "consumer")
	m.r.notifyBack(k, id)
	m.touched[id] = true
	if inc := m.inc[id]; inc != nil {
		inc.from[k] = true
	}
}

// round runs one Poll and gives reported blocks back to the free set, so
// later requests reuse them.
func (m *model) round() {
	rd := m.r.poll()
	m.recycle(rd)
}

func (m *model) recycle(rd Ready) {
	t := m.r.t
	for _, id := range rd.FinishedSending {
		if inc := m.inc[id]; inc != nil && m.r.now.Before(inc.at.Add(10*time.Second)) {
			require.GreaterOrEqual(t, len(inc.from), inc.need, "send %q finished before its lease with notifications from %d distinct consumers of its own", id, len(inc.from))
		}
	}
	for _, id := range rd.FinishedReceiving {
		if inc := m.inc[id]; inc != nil {
			require.GreaterOrEqual(t, len(inc.from), inc.need, "receive %q finished with writes from %d distinct producers of its own", id, len(inc.from))
		}
	}
	for _, id := range rd.FinishedSending {
		delete(m.inc, id)
	}
	for _, id := range rd.FinishedReceiving {
		delete(m.inc, id)
	}
	for _, f := range rd.Failed {
		delete(m.inc, f.Request)
	}
	var back []uint32
	p := m.r.c.pools[m.r.pool-1]
	for b, o := range p.owner {
		if o == OwnerEngine {
			back = append(back, uint32(b))
		}
	}
	require.NoError(m.r.t, m.r.c.Free(m.r.pool, back))
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
func (m *model) check() {
	t, c := m.r.t, m.r.c
	holder := checkHolders(t, c)
	for ref, id := range holder {
		require.Contains(t, []Owner{OwnerTransfer, OwnerRetained, OwnerQuarantined}, c.Owner(ref), "block %v of unreported request %q", ref, id)
	}
	// A producer's write still running reaches only blocks of its pending
	// receive, or quarantined ones: never the engine's, nor a free block.
	m.settlePushes()
	for _, p := range m.pushes {
		for _, b := range p.blocks {
			ref := BlockRef{m.r.pool, b}
			o := c.Owner(ref)
			require.Contains(t, []Owner{OwnerTransfer, OwnerQuarantined}, o, "a producer's running write reaches %v held by %v", ref, o)
			if o == OwnerTransfer {
				require.Equal(t, p.id, holder[ref], "a producer's running write for %q reaches %v of another request", p.id, ref)
			}
		}
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
		require.NoError(r.t, r.removePeer("p"))
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
	m.releaseProducers()
	require.Empty(r.t, m.pushes, "a producer's write never ended")
	require.NoError(r.t, r.close())
	r.shutdown()
}

// abandon releases everything best-effort, asserting nothing: removing the
// peer, expiring every lease and closing the Core, then the remote agents.
func (m *model) abandon() {
	r := m.r
	m.releaseProducers()
	_ = r.removePeer("p")
	r.now = r.now.Add(time.Minute)
	deadline := time.Now().Add(wait)
	for r.close() != nil && time.Now().Before(deadline) {
		r.poll()
		// Pacing, not synchronisation: a round of close may end with
		// nothing for a transport to wake on (a Release refused by an
		// injected fault is simply tried again), so the loop decides by
		// close's answer and retries every millisecond until the deadline.
		time.Sleep(time.Millisecond)
	}
	for _, rm := range r.remotes {
		if rm.back != 0 {
			_, _ = rm.tr.UnloadPeers(r.ctx, []sdk.PeerID{rm.back})
		}
		_, _ = rm.tr.DeregisterMemory(r.ctx, []sdk.RegionID{rm.region})
		_ = rm.tr.Close(r.ctx)
	}
}
