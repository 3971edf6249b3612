package coreonfake

import (
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/plugins/fake"
	"github.com/custody-dev/custody/sdk"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// model is what the property test remembers: the requests it issued.
type model struct {
	r         *rig
	n         int
	issued    map[core.RequestID]bool
	sends     []core.RequestID
	connected bool
	pushes    []push                 // producers' writes into our pool, until released
	pdl       map[int][2]sdk.DlistID // per remote rank: its local dlist, its dlist of our pool
	inc       map[core.RequestID]*incarnation
	// touched: ids some notification was sent for. Delivery is
	// asynchronous, so one may still be in flight when the id is reused;
	// core cannot tell it from the new request's (ids carry no generation,
	// see core/doc.go), so reuse picks only untouched ids. Late
	// notifications that arrive before the reuse are
	// TestLateNotificationNeverFinishesAReusedID's.
	touched map[core.RequestID]bool
	// gen counts the registrations of each id; held is the registration
	// that holds each block of a request issued and not reported yet; and
	// handles is the registration each live handle was posted for, as the
	// first check after its post found it.
	gen     map[core.RequestID]int
	held    map[core.BlockRef]reqKey
	handles map[sdk.HandleID]reqKey
}

// reqKey names one registration of a request id: the engine reuses ids.
type reqKey struct {
	id  core.RequestID
	gen int
}

// token is the notification token of id's next registration: tok(id) for
// the first, one of its own for each reuse. A request issued again under a
// reported id is a new request, so it has a new token: core refuses the
// same id, token and kind as the retry of a call whose reply was lost
// (ErrDuplicate).
func (m *model) token(id core.RequestID) core.Token { return genToken(id, m.gen[id]+1) }

// sentToken is the token of id's latest registration.
func (m *model) sentToken(id core.RequestID) core.Token { return genToken(id, m.gen[id]) }

func genToken(id core.RequestID, gen int) core.Token {
	if gen <= 1 {
		return tok(id)
	}
	return tok(core.RequestID(fmt.Sprintf("%s#%d", id, gen)))
}

// issue records a request core accepted on blocks: no block of it may be
// held by another request not yet reported.
func (m *model) issue(id core.RequestID, blocks []uint32) reqKey {
	m.issued[id] = true
	m.gen[id]++
	k := reqKey{id, m.gen[id]}
	for _, b := range blocks {
		ref := core.BlockRef{Pool: m.r.pool, Block: b}
		if other, ok := m.held[ref]; ok {
			require.Failf(m.r.t, "block shared", "%v held by requests %q and %q", ref, other.id, id)
		}
		m.held[ref] = k
	}
	return k
}

// holders is held without the requests core reported in the Work of a
// command, handed to the next poll (the rig's stash).
func (m *model) holders() map[core.BlockRef]reqKey {
	gone := map[core.RequestID]bool{}
	for _, id := range slices.Concat(m.r.stash.FinishedSending, m.r.stash.FinishedReceiving, failedIDs(m.r.stash)) {
		gone[id] = true
	}
	out := make(map[core.BlockRef]reqKey, len(m.held))
	for ref, k := range m.held {
		if !gone[k.id] {
			out[ref] = k
		}
	}
	return out
}

func partsBlocks(parts []core.Part) []uint32 {
	var out []uint32
	for _, p := range parts {
		out = append(out, p.Local...)
	}
	return out
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

func (m *model) registered(id core.RequestID, need int) *incarnation {
	inc := &incarnation{at: m.r.now, need: need, from: map[int]bool{}}
	m.inc[id] = inc
	return inc
}

// push is one write a remote rank posted into our pool for a receive.
type push struct {
	id     core.RequestID
	key    reqKey // the registration it writes for
	k      int
	h      sdk.HandleID
	blocks []uint32
}

// id names a new request; it is issued once registered.
func (m *model) id(kind string) core.RequestID {
	m.n++
	return core.RequestID(fmt.Sprintf("%s%d", kind, m.n))
}

// blocks takes n engine blocks, or reports that too few are free.
func (m *model) blocks(n int) ([]uint32, bool) {
	b, err := m.r.c.Alloc(m.r.pool, n)
	return b, err == nil
}

func (m *model) parts(t *rapid.T, n int) ([]core.Part, bool) {
	var parts []core.Part
	for k := 0; k < n; k++ {
		b, ok := m.blocks(1)
		if !ok {
			return nil, false
		}
		parts = append(parts, core.Part{Pool: m.r.pool, Local: b, Rank: k, Remote: []uint32{uint32(rapid.IntRange(0, nBlocks-1).Draw(t, "remote"))}})
	}
	return parts, true
}

func (m *model) read(t *rapid.T, n int, notify bool) {
	parts, ok := m.parts(t, n)
	if !ok {
		return
	}
	id := m.id("r")
	require.NoError(t, m.r.read(core.ReadSpec{Request: id, Token: m.token(id), Peer: "p", Parts: parts, NotifyProducer: notify}))
	m.issue(id, partsBlocks(parts))
}

func (m *model) write(t *rapid.T, n int) {
	parts, ok := m.parts(t, n)
	if !ok {
		return
	}
	id := m.id("w")
	require.NoError(t, m.r.write(core.WriteSpec{Request: id, Token: m.token(id), Peer: "p", Parts: parts, Consumers: n, Lease: 10 * time.Second}))
	m.issue(id, partsBlocks(parts))
	m.registered(id, n)
	m.sends = append(m.sends, id)
}

func (m *model) expectSend(t *rapid.T, id core.RequestID) bool {
	b, ok := m.blocks(rapid.IntRange(1, 2).Draw(t, "send blocks"))
	if !ok {
		return false
	}
	require.NoError(t, m.r.c.ExpectSend(m.r.now, core.SendSpec{Request: id, Token: m.token(id), Pool: m.r.pool, Blocks: b, Consumers: 1, Lease: 10 * time.Second}))
	m.issue(id, b)
	m.registered(id, 1)
	m.sends = append(m.sends, id)
	return true
}

// receive expects a push of one or two blocks from one or two producer
// ranks, each of which writes (or, drawn, never does) its share and
// notifies on DONE with the written notification.
func (m *model) receive(t *rapid.T, id core.RequestID) bool {
	if !m.connected {
		return false
	}
	n := rapid.IntRange(1, 2).Draw(t, "producers")
	b, ok := m.blocks(rapid.IntRange(1, 2).Draw(t, "receive blocks"))
	if !ok {
		return false
	}
	r := m.r
	token := m.token(id)
	require.NoError(t, r.c.ExpectReceive(r.now, core.RecvSpec{Request: id, Token: token, Peer: "p", Pool: r.pool, Blocks: b, Producers: n, Lease: 10 * time.Second}))
	key := m.issue(id, b)
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
		res, err := rm.tr.Post(r.ctx, []sdk.PostSpec{{Op: sdk.OpWrite, Local: dl[0], LocalIndices: share, Remote: dl[1], RemoteIndices: share, Notification: core.WrittenMessage(id, token)}})
		require.NoError(t, err)
		require.NoError(t, res[0].Err)
		m.pushes = append(m.pushes, push{id: id, key: key, k: k, h: res[0].ID, blocks: share})
		m.touched[id] = true
		inc.from[k] = true
	}
	return true
}

// reuse issues a send or receive again under the id of one already
// reported, as an engine may; the second must get exactly one report of
// its own.
func (m *model) reuse(t *rapid.T) {
	var done []core.RequestID
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
	m.r.notifyBack(k, id, m.sentToken(id))
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

func (m *model) recycle(rd core.Ready) {
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
	// Reported: the registrations give their blocks back.
	gone := map[core.RequestID]bool{}
	for _, id := range slices.Concat(rd.FinishedSending, rd.FinishedReceiving, failedIDs(rd)) {
		gone[id] = true
	}
	for ref, k := range m.held {
		if gone[k.id] {
			delete(m.held, ref)
		}
	}
	var back []uint32
	for b := range uint32(nBlocks) {
		if m.r.c.Owner(core.BlockRef{Pool: m.r.pool, Block: b}) == core.OwnerEngine {
			back = append(back, b)
		}
	}
	require.NoError(m.r.t, m.r.c.Free(m.r.pool, back))
}

// check asserts the invariants that hold after every step: every block of
// a request not reported yet is held for it (never the engine's, nor
// free); every live handle reaches only blocks of its own unreported
// request, held for a transfer (or retained); so does a producer's write
// still running, or quarantined ones; and no handle was released before
// the transport reported it terminal.
func (m *model) check() {
	t, c := m.r.t, m.r.c
	holder := m.holders()
	for ref, k := range holder {
		require.Contains(t, []core.Owner{core.OwnerTransfer, core.OwnerRetained, core.OwnerQuarantined}, c.Owner(ref), "block %v of unreported request %q", ref, k.id)
	}
	live := m.r.tr.live()
	for h := range m.handles {
		if _, ok := live[h]; !ok {
			delete(m.handles, h) // released
		}
	}
	for h, blocks := range live {
		for _, b := range blocks {
			ref := core.BlockRef{Pool: m.r.pool, Block: b}
			o := c.Owner(ref)
			require.Contains(t, []core.Owner{core.OwnerTransfer, core.OwnerRetained}, o, "live handle %v reaches %v held by %v", h, ref, o)
			k, ok := holder[ref]
			require.True(t, ok, "live handle %v reaches %v, which no unreported request holds", h, ref)
			if first, ok := m.handles[h]; ok {
				require.Equal(t, first, k, "live handle %v of request %q reaches %v of another request", h, first.id, ref)
			} else {
				m.handles[h] = k
			}
		}
	}
	// A producer's write still running reaches only blocks of its pending
	// receive, or quarantined ones: never the engine's, nor a free block.
	m.settlePushes()
	for _, p := range m.pushes {
		for _, b := range p.blocks {
			ref := core.BlockRef{Pool: m.r.pool, Block: b}
			o := c.Owner(ref)
			require.Contains(t, []core.Owner{core.OwnerTransfer, core.OwnerQuarantined}, o, "a producer's running write reaches %v held by %v", ref, o)
			if o == core.OwnerTransfer {
				require.Equal(t, p.key, holder[ref], "a producer's running write for %q reaches %v of another request", p.id, ref)
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
	r.until("every request reported", func(rd core.Ready) bool {
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
