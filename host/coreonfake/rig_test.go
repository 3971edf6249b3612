package coreonfake

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/plugins/fake"
	"github.com/custody-dev/custody/sdk"
)

// wait bounds every wait on the fake's DMA engine in these tests.
const wait = 10 * time.Second

const (
	blockSize = 4096
	nBlocks   = 16
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// remote is one producer rank: a fake agent with one registered pool.
type remote struct {
	tr     *fake.Transport
	name   string
	path   string
	region sdk.RegionID
	md     []byte
	back   sdk.PeerID // the local agent loaded into this one, to notify it
}

// testingT is what the rig needs of *testing.T and *rapid.T.
type testingT interface {
	require.TestingT
	Helper()
}

// rig is a Core over a spied fake agent ("dec"), and remote fake agents
// ("pre0", ...) to read from and write to, all in one test directory.
type rig struct {
	t       testingT
	ctx     context.Context
	dir     string
	tr      *spy
	c       *core.Core
	pool    core.PoolID
	path    string
	remotes []*remote
	now     time.Time
	seen    map[core.RequestID]int
	all     core.Ready // every Ready so far, concatenated
	last    core.Ready // the most recent Ready
	stash   core.Ready // reports of commands' Work, returned by the next poll
	trs     map[core.Epoch]sdk.Transport
	// noEvents: attach without events (the fallback: poll every live
	// handle).
	noEvents bool
}

// transport is the rig's transport of epoch e, nil for a dead one.
func (r *rig) transport(e core.Epoch) sdk.Transport { return r.trs[e] }

// settle runs the Work commands handed out and keeps their reports for the
// next poll.
func (r *rig) settle() {
	r.stash = mergeReady(r.stash, drive(r.ctx, r.c, r.transport, r.c.Ready()))
}

// attach attaches tr as epoch e and registers the pools again.
func (r *rig) attach(tr *spy, e core.Epoch) error {
	desc, err := tr.Describe(r.ctx)
	if err != nil {
		return err
	}
	if err := r.c.Attach(e, desc, !r.noEvents); err != nil {
		return err
	}
	r.trs[e] = tr
	r.tr = tr
	r.settle()
	return nil
}

// registerPool registers a pool and waits for its Work.
func (r *rig) registerPool(spec core.PoolSpec) (core.PoolID, error) {
	id, err := r.c.RegisterPool(spec)
	if err != nil {
		return 0, err
	}
	r.settle()
	if ok, err := r.c.PoolReady(id); !ok {
		return id, fmt.Errorf("pool %d not ready: %w", id, err)
	}
	return id, nil
}

// connectPeer runs a handshake to its end and returns its error: the
// handshake_failed Alert's.
func (r *rig) connectPeer(spec core.PeerSpec) error {
	if err := r.c.ConnectPeer(spec); err != nil {
		return err
	}
	before := len(r.stash.Alerts)
	r.settle()
	for _, a := range r.stash.Alerts[before:] {
		if a.Kind == "handshake_failed" && a.Peer == spec.Name {
			return a.Err
		}
	}
	return nil
}

func (r *rig) read(spec core.ReadSpec) error {
	err := r.c.Read(r.now, spec)
	r.settle()
	return err
}

func (r *rig) write(spec core.WriteSpec) error {
	err := r.c.Write(r.now, spec)
	r.settle()
	return err
}

func (r *rig) removePeer(name string) error {
	err := r.c.RemovePeer(r.now, name)
	r.settle()
	return err
}

// close runs Close as far as it goes now (closeCore).
func (r *rig) close() error {
	rd, err := closeCore(r.ctx, r.c, r.transport, r.now)
	r.stash = mergeReady(r.stash, rd)
	return err
}

type rigOpts struct {
	local    string            // fault parameter of the local agent
	remote   map[int]string    // fault parameter per remote rank
	ranks    int               // remote ranks (default 2)
	cfg      core.Config       //
	setup    func(s *spy)      //
	params   map[string]string // extra local params
	fence    string            // fence parameter of every agent ("" for the fake's default, incoming)
	noClose  bool              // the test ends the rig itself
	noEvents bool              // attach without events: core polls every live handle
}

func newRig(t *testing.T, o rigOpts) *rig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	t.Cleanup(cancel)
	r := openRig(t, ctx, t.TempDir(), o)
	if !o.noClose {
		t.Cleanup(r.shutdown)
	}
	return r
}

// openRig opens the agents and the Core of a rig in dir.
func openRig(t testingT, ctx context.Context, dir string, o rigOpts) *rig {
	t.Helper()
	if o.ranks == 0 {
		o.ranks = 2
	}
	r := &rig{t: t, ctx: ctx, dir: dir, now: t0, seen: map[core.RequestID]int{}, noEvents: o.noEvents}
	params := map[string]string{"dir": r.dir}
	for k, v := range o.params {
		params[k] = v
	}
	if o.local != "" {
		params["fault"] = o.local
	}
	if o.fence != "" {
		params["fence"] = o.fence
	}
	r.tr = newSpy(fake.New())
	if o.setup != nil {
		o.setup(r.tr)
	}
	require.NoError(t, r.tr.Open(ctx, sdk.OpenRequest{Agent: "dec", Params: params}))
	for i := 0; i < o.ranks; i++ {
		rp := map[string]string{"dir": r.dir}
		if f := o.remote[i]; f != "" {
			rp["fault"] = f
		}
		if o.fence != "" {
			rp["fence"] = o.fence
		}
		rm := &remote{tr: fake.New(), name: "pre" + string(rune('0'+i))}
		require.NoError(t, rm.tr.Open(ctx, sdk.OpenRequest{Agent: rm.name, Params: rp}))
		rm.path = r.regionFile(byte(i + 1))
		regs, err := rm.tr.RegisterMemory(ctx, []sdk.Region{{Path: rm.path, Length: blockSize * nBlocks, Kind: sdk.MemoryHost}})
		require.NoError(t, err)
		require.NoError(t, regs[0].Err)
		rm.region = regs[0].ID
		rm.md, err = rm.tr.LocalMetadata(ctx)
		require.NoError(t, err)
		r.remotes = append(r.remotes, rm)
	}
	c, err := core.New(o.cfg)
	require.NoError(t, err)
	r.c = c
	r.trs = map[core.Epoch]sdk.Transport{}
	require.NoError(t, r.attach(r.tr, 1))
	r.path = r.regionFile(0)
	r.pool, err = r.registerPool(core.PoolSpec{Path: r.path, BlockSize: blockSize, Blocks: nBlocks})
	require.NoError(t, err)
	return r
}

// regionFile makes a pool file whose every byte is fill.
func (r *rig) regionFile(fill byte) string {
	path, err := fake.NewRegionFile(r.dir, blockSize*nBlocks)
	require.NoError(r.t, err)
	if fill != 0 {
		b := make([]byte, blockSize*nBlocks)
		for i := range b {
			b[i] = fill
		}
		require.NoError(r.t, os.WriteFile(path, b, 0o600))
	}
	return path
}

// spec is the PeerSpec of the remote ranks; notifyOnly ranks get no blocks.
func (r *rig) spec(name string, notifyOnly ...int) core.PeerSpec {
	ps := core.PeerSpec{Name: name}
	for i, rm := range r.remotes {
		rs := core.RankSpec{Agent: rm.name, Metadata: rm.md, Region: rm.region, BlockSize: blockSize, Blocks: nBlocks}
		for _, n := range notifyOnly {
			if n == i {
				rs.Blocks = 0
			}
		}
		ps.Ranks = append(ps.Ranks, rs)
	}
	return ps
}

func (r *rig) connect(name string) {
	r.t.Helper()
	require.NoError(r.t, r.connectPeer(r.spec(name)))
}

// alloc hands n blocks to the engine.
func (r *rig) alloc(n int) []uint32 {
	r.t.Helper()
	b, err := r.c.Alloc(r.pool, n)
	require.NoError(r.t, err)
	return b
}

// readSpec reads one block per rank into fresh engine blocks.
func (r *rig) readSpec(id core.RequestID, peer string, ranks int) (core.ReadSpec, []core.BlockRef) {
	r.t.Helper()
	spec := core.ReadSpec{Request: id, Token: tok(id), Peer: peer}
	var blocks []core.BlockRef
	for k := 0; k < ranks; k++ {
		b := r.alloc(1)
		spec.Parts = append(spec.Parts, core.Part{Pool: r.pool, Local: b, Rank: k, Remote: []uint32{uint32(k)}})
		blocks = append(blocks, core.BlockRef{Pool: r.pool, Block: b[0]})
	}
	return spec, blocks
}

// poll runs one round and records its reports, failing the test on a second
// report of any request.
func (r *rig) poll() core.Ready {
	r.t.Helper()
	return r.pollCtx(r.ctx)
}

// pollCtx is poll whose transport calls use ctx.
func (r *rig) pollCtx(ctx context.Context) core.Ready {
	r.t.Helper()
	rd := mergeReady(r.stash, drive(ctx, r.c, r.transport, r.c.Poll(r.now)))
	r.stash = core.Ready{}
	for _, id := range rd.FinishedSending {
		r.seen[id]++
	}
	for _, id := range rd.FinishedReceiving {
		r.seen[id]++
	}
	for _, f := range rd.Failed {
		r.seen[f.Request]++
	}
	for id, n := range r.seen {
		require.LessOrEqual(r.t, n, 1, "request %q reported twice", id)
	}
	r.all.FinishedSending = append(r.all.FinishedSending, rd.FinishedSending...)
	r.all.FinishedReceiving = append(r.all.FinishedReceiving, rd.FinishedReceiving...)
	r.all.Failed = append(r.all.Failed, rd.Failed...)
	r.all.InvalidBlocks = append(r.all.InvalidBlocks, rd.InvalidBlocks...)
	r.all.Quarantined = append(r.all.Quarantined, rd.Quarantined...)
	r.all.Fence = append(r.all.Fence, rd.Fence...)
	r.all.Alerts = append(r.all.Alerts, rd.Alerts...)
	r.last = rd
	return rd
}

// until polls rounds until cond holds, bounded by wait; it returns the Ready
// of the round in which cond first held.
func (r *rig) until(what string, cond func(core.Ready) bool) core.Ready {
	r.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		rd := r.poll()
		if cond(rd) {
			return rd
		}
		require.True(r.t, time.Now().Before(deadline), "timed out waiting for %s; stats %+v", what, r.c.Stats())
		time.Sleep(time.Millisecond) // pacing of the poll loop, not synchronisation
	}
}

// reported waits for the round that reports id and returns it.
func (r *rig) reported(id core.RequestID) core.Ready {
	r.t.Helper()
	return r.until("report of "+string(id), func(core.Ready) bool { return r.seen[id] == 1 })
}

func (r *rig) owners(blocks []core.BlockRef) []core.Owner {
	out := make([]core.Owner, len(blocks))
	for i, b := range blocks {
		out[i] = r.c.Owner(b)
	}
	return out
}

func repeat[T any](v T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func failedIDs(rd core.Ready) []core.RequestID {
	var out []core.RequestID
	for _, f := range rd.Failed {
		out = append(out, f.Request)
	}
	return out
}

func hasAlert(rd core.Ready, kind string) bool {
	for _, a := range rd.Alerts {
		if a.Kind == kind {
			return true
		}
	}
	return false
}

// shutdown closes the Core (polling while it is held), checks that the
// agents hold nothing, and closes them.
func (r *rig) shutdown() {
	t := r.t
	deadline := time.Now().Add(wait)
	for {
		err := r.close()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("Close still refused: %v", err)
			break
		}
		// A send or receive Close failed is reported at its lease (rule 16):
		// the clock goes there, as the host's rounds would.
		if at := r.poll().Next.At; at.After(r.now) {
			r.now = at
		}
		time.Sleep(time.Millisecond) // pacing: the loop decides by close's answer, within the deadline
	}
	// Close succeeded, so the local agent's own Close did: the fake refuses
	// it while any region, peer, dlist or handle is held.
	r.poll()
	for _, rm := range r.remotes {
		if rm.back != 0 {
			_, _ = rm.tr.UnloadPeers(r.ctx, []sdk.PeerID{rm.back})
		}
		_, _ = rm.tr.DeregisterMemory(r.ctx, []sdk.RegionID{rm.region})
		res, err := rm.tr.Resources(r.ctx)
		if err == nil {
			require.True(t, res.Zero(), "remote %s still holds %+v", rm.name, res)
		}
		_ = rm.tr.Close(r.ctx)
	}
}

// notifyBack sends the consumed notification of id with token from remote
// rank k to the local agent, loading the local agent into it first.
func (r *rig) notifyBack(k int, id core.RequestID, token core.Token) {
	r.t.Helper()
	rm := r.loadBack(k)
	errs, err := rm.tr.SendNotifications(r.ctx, []sdk.OutboundNotification{{Peer: rm.back, Message: core.ConsumedMessage(id, token)}})
	require.NoError(r.t, err)
	require.NoError(r.t, errs[0])
}

// loadBack loads the local agent into remote rank k, once, so it can notify
// the local agent or write into its pool.
func (r *rig) loadBack(k int) *remote {
	r.t.Helper()
	rm := r.remotes[k]
	if rm.back == 0 {
		md, err := r.tr.LocalMetadata(r.ctx)
		require.NoError(r.t, err)
		res, err := rm.tr.LoadPeers(r.ctx, []sdk.PeerSpec{{Name: "dec", Metadata: md}})
		require.NoError(r.t, err)
		require.NoError(r.t, res[0].Err)
		rm.back = res[0].ID
	}
	return rm
}

// tok is the notification token tests give request id: fixed per id, so
// both sides of a test agree on it without passing it around, and never
// zero.
func tok(id core.RequestID) core.Token {
	h := fnv.New64a()
	h.Write([]byte(id))
	return core.Token(h.Sum64() | 1)
}

// skipStallsIfShort skips, under go test -short, a test that waits for the
// fake's stalls in real time (100 ms to 1 s). make mutate runs the tests
// with -short, once per mutant; the full run (make test, CI) keeps them.
func skipStallsIfShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("waits for the fake's real-time stalls; run without -short")
	}
}
