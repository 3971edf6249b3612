package core

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// double is a scripted in-memory transport for core's Work: a model of the
// native resources of one agent that answers every call at once, with no
// goroutine and no clock, so a test's result never depends on the
// scheduler. Handles stay IN_PROGRESS until the test sets their state; any
// call can be made to fail, as a whole or per item, at any step (fail),
// every call at once (refuse), a handle's calls (failHandle) or an item
// counted over the double's life (failNth).
type double struct {
	desc    sdk.Description
	next    uint64
	handles map[sdk.HandleID]sdk.State
	reasons map[sdk.HandleID]error
	events  []sdk.Event
	regions map[sdk.RegionID]bool
	peers   map[sdk.PeerID]string
	dlists  map[sdk.DlistID]bool
	inbox   []sdk.Notification
	sent    []sdk.OutboundNotification
	// riding are the notifications posted with a transfer, by handle;
	// carried are those delivered, each once its transfer turned DONE.
	riding  map[sdk.HandleID]sdk.OutboundNotification
	carried [][]byte
	rides   int // posts that carried a notification
	// delivered is every notification that reached its peer, in order:
	// those sent, and those carried by a transfer that turned DONE.
	delivered []sdk.OutboundNotification
	dlistPeer map[sdk.DlistID]sdk.PeerID // the peer of each remote dlist
	peerNames map[sdk.PeerID]string      // every peer ever loaded, by id
	// seenState is each handle's state as a Poll or an Event last told
	// core; releasedEarly are the handles Release was asked for before
	// core was told they were terminal (rule 1).
	seenState     map[sdk.HandleID]sdk.State
	releasedEarly []sdk.HandleID
	canceled      []sdk.HandleID // every handle Cancel was asked for
	unloaded      []sdk.PeerID   // every peer unloaded
	// refuse, while set, fails every call as a whole with it, before it
	// takes effect: a call whose context ended before it started.
	refuse error
	// handleFaults fail one handle's item in calls of a kind; nth counts
	// the items of each kind over the double's life, for failNth.
	handleFaults []*handleFault
	nth          map[WorkKind]int
	// cancelTo is the state Cancel moves a running handle to; zero: Cancel
	// changes nothing (UCX's put and get).
	cancelTo sdk.State
	faults   []*fault
	calls    []string // every call, "Kind [args]", in order
	closed   bool
}

// fault makes the next times calls of kind fail: the whole call with whole
// (applied: after taking effect, as a timeout may), or item item with
// itemErr. times < 0 is forever.
type fault struct {
	kind    WorkKind
	whole   error
	applied bool
	item    int
	itemErr error
	times   int
	life    bool // item counts over the double's life (failNth)
}

// handleFault makes handle h's item of the next times calls of kind fail
// with err.
type handleFault struct {
	kind  WorkKind
	h     sdk.HandleID
	err   error
	times int
}

func newDouble() *double {
	return &double{
		dlistPeer: map[sdk.DlistID]sdk.PeerID{}, peerNames: map[sdk.PeerID]string{}, seenState: map[sdk.HandleID]sdk.State{}, nth: map[WorkKind]int{},
		desc: sdk.Description{
			Name: "double", ContractMajor: 1,
			Capabilities: sdk.Capabilities{Remote: true, Notifications: true, Cancel: true},
			FenceScope:   sdk.FenceInitiatedAndIncoming,
		},
		handles: map[sdk.HandleID]sdk.State{}, reasons: map[sdk.HandleID]error{}, riding: map[sdk.HandleID]sdk.OutboundNotification{},
		regions: map[sdk.RegionID]bool{}, peers: map[sdk.PeerID]string{}, dlists: map[sdk.DlistID]bool{},
	}
}

func (d *double) id() uint64 { d.next++; return d.next }

// failWhole makes the next times calls of kind fail as a whole with err.
func (d *double) failWhole(kind WorkKind, err error, times int) {
	d.faults = append(d.faults, &fault{kind: kind, whole: err, item: -1, times: times})
}

// failItem makes item k of the next times calls of kind fail with err.
func (d *double) failItem(kind WorkKind, k int, err error, times int) {
	d.faults = append(d.faults, &fault{kind: kind, item: k, itemErr: err, times: times})
}

// failEvery makes every item of the next times calls of kind fail with err.
func (d *double) failEvery(kind WorkKind, err error, times int) {
	d.faults = append(d.faults, &fault{kind: kind, item: everyItem, itemErr: err, times: times})
}

// everyItem is the item of a fault that applies to all of a call's items.
const everyItem = -2

// failHandle makes handle h's item of the next times calls of kind (Poll,
// Release, Cancel) fail with err, wherever it is in the call: a fault of
// one transfer, as the fake's poll-fail and release-fail are.
func (d *double) failHandle(kind WorkKind, h sdk.HandleID, err error, times int) {
	d.handleFaults = append(d.handleFaults, &handleFault{kind: kind, h: h, err: err, times: times})
}

// failNth makes the item n (0-based) of kind, counted over the double's
// life, fail with err: the fake's load-peer-fail and prepare-fail with
// rank=n (the pool's local dlist is item 0 of PrepareDescriptors).
func (d *double) failNth(kind WorkKind, n int, err error) {
	d.faults = append(d.faults, &fault{kind: kind, item: n, itemErr: err, times: -1, life: true})
}

// handleErr is the fault of handle h in a call of kind, used up, or nil.
func (d *double) handleErr(kind WorkKind, h sdk.HandleID) error {
	for _, f := range d.handleFaults {
		if f.kind == kind && f.h == h && f.times != 0 {
			f.times--
			return f.err
		}
	}
	return nil
}

// take returns the faults of kind that apply to this call, using them up.
func (d *double) take(kind WorkKind, n int) (whole *fault, items map[int]error) {
	items = map[int]error{}
	base := d.nth[kind]
	for _, f := range d.faults {
		if f.kind != kind || f.times == 0 {
			continue
		}
		if f.life {
			if k := f.item - base; k >= 0 && k < n {
				items[k] = f.itemErr
				f.times = 0
			}
			continue
		}
		if f.item == everyItem {
			if f.times > 0 {
				f.times--
			}
			for k := range n {
				items[k] = f.itemErr
			}
			continue
		}
		if f.times > 0 {
			f.times--
		}
		if f.whole != nil {
			if whole == nil {
				whole = f
			}
			continue
		}
		items[f.item] = f.itemErr
	}
	return whole, items
}

// set moves handle h to st (an event when the double offers events).
func (d *double) set(h sdk.HandleID, st sdk.State, reason error) {
	if _, ok := d.handles[h]; !ok {
		panic(fmt.Sprintf("double: no handle %d", h))
	}
	d.handles[h], d.reasons[h] = st, reason
	if n, ok := d.riding[h]; ok && st.Terminal() {
		delete(d.riding, h)
		if st == sdk.StateDone {
			d.carried = append(d.carried, n.Message)
			d.delivered = append(d.delivered, n)
		}
	}
	if d.desc.Capabilities.Events {
		d.events = append(d.events, sdk.Event{Handle: h, State: st, Reason: reason})
	}
}

// held counts what the agent holds natively.
func (d *double) held() sdk.Resources {
	return sdk.Resources{Regions: uint64(len(d.regions)), Peers: uint64(len(d.peers)), Dlists: uint64(len(d.dlists)), Handles: uint64(len(d.handles))}
}

func notFound(what string, id uint64) error {
	return sdk.Errorf(sdk.CodeNotFound, "double: %s %d not found", what, id)
}

// exec answers w.
func (d *double) exec(w Work) (Result, error) {
	d.calls = append(d.calls, describeWork(w))
	if d.refuse != nil {
		return Result{}, d.refuse
	}
	n := workItems(w)
	whole, items := d.take(w.Kind, n)
	d.nth[w.Kind] += n
	if whole != nil && !whole.applied {
		return Result{}, whole.whole
	}
	switch w.Kind {
	case WorkPoll, WorkRelease, WorkCancel:
		for k, h := range w.Handles {
			if err := d.handleErr(w.Kind, h); err != nil {
				items[k] = err
			}
		}
	}
	var res Result
	errs := func(n int, f func(k int) error) []error {
		out := make([]error, n)
		for k := range out {
			if e, ok := items[k]; ok {
				out[k] = e
				continue
			}
			out[k] = f(k)
		}
		return out
	}
	switch w.Kind {
	case WorkPost:
		for k := range w.Posts {
			if e, ok := items[k]; ok {
				res.Posts = append(res.Posts, sdk.PostResult{Err: e})
				continue
			}
			h := sdk.HandleID(d.id())
			d.handles[h] = sdk.StateInProgress
			if m := w.Posts[k].Notification; len(m) > 0 {
				d.riding[h] = sdk.OutboundNotification{Peer: d.dlistPeer[w.Posts[k].Remote], Message: m}
				d.rides++
			}
			res.Posts = append(res.Posts, sdk.PostResult{ID: h})
		}
	case WorkPoll:
		for k, h := range w.Handles {
			st, ok := d.handles[h]
			switch e, bad := items[k]; {
			case bad:
				res.States = append(res.States, sdk.HandleStatus{Err: e})
			case !ok:
				res.States = append(res.States, sdk.HandleStatus{Err: notFound("handle", uint64(h))})
			default:
				res.States = append(res.States, sdk.HandleStatus{State: st, Reason: d.reasons[h]})
				d.seenState[h] = st
			}
		}
	case WorkEvents:
		res.Events, d.events = d.events, nil
		for _, e := range res.Events {
			d.seenState[e.Handle] = e.State
		}
	case WorkRelease:
		for k, h := range w.Handles {
			if _, bad := items[k]; !bad && !d.seenState[h].Terminal() {
				d.releasedEarly = append(d.releasedEarly, h)
			}
		}
		res.Errs = errs(len(w.Handles), func(k int) error {
			h := w.Handles[k]
			st, ok := d.handles[h]
			switch {
			case !ok:
				return notFound("handle", uint64(h))
			case !st.Terminal():
				return sdk.Errorf(sdk.CodeBusy, "double: handle %d is %v", h, st)
			}
			delete(d.handles, h)
			delete(d.reasons, h)
			delete(d.seenState, h)
			return nil
		})
	case WorkCancel:
		d.canceled = append(d.canceled, w.Handles...)
		res.Errs = errs(len(w.Handles), func(k int) error {
			h := w.Handles[k]
			st, ok := d.handles[h]
			if !ok {
				return notFound("handle", uint64(h))
			}
			if !st.Terminal() && d.cancelTo != 0 {
				d.set(h, d.cancelTo, sdk.Errorf(sdk.CodeCanceled, "double: canceled"))
			}
			return nil
		})
	case WorkSendNotifications:
		res.Errs = errs(len(w.Notes), func(k int) error {
			if _, ok := d.peers[w.Notes[k].Peer]; !ok {
				return notFound("peer", uint64(w.Notes[k].Peer))
			}
			d.sent = append(d.sent, w.Notes[k])
			d.delivered = append(d.delivered, w.Notes[k])
			return nil
		})
	case WorkNotifications:
		res.Notifications, d.inbox = d.inbox, nil
	case WorkRegisterMemory:
		for k := range w.Regions {
			if e, ok := items[k]; ok {
				res.Registrations = append(res.Registrations, sdk.Registration{Err: e})
				continue
			}
			id := sdk.RegionID(d.id())
			d.regions[id] = true
			res.Registrations = append(res.Registrations, sdk.Registration{ID: id})
		}
	case WorkDeregisterMemory:
		res.Errs = errs(len(w.RegionIDs), func(k int) error {
			if !d.regions[w.RegionIDs[k]] {
				return notFound("region", uint64(w.RegionIDs[k]))
			}
			delete(d.regions, w.RegionIDs[k])
			return nil
		})
	case WorkLoadPeers:
		for k, p := range w.Peers {
			if e, ok := items[k]; ok {
				res.PeerResults = append(res.PeerResults, sdk.PeerResult{Err: e})
				continue
			}
			id := sdk.PeerID(d.id())
			d.peers[id] = p.Name
			d.peerNames[id] = p.Name
			res.PeerResults = append(res.PeerResults, sdk.PeerResult{ID: id})
		}
	case WorkUnloadPeers:
		res.Errs = errs(len(w.PeerIDs), func(k int) error {
			if _, ok := d.peers[w.PeerIDs[k]]; !ok {
				return notFound("peer", uint64(w.PeerIDs[k]))
			}
			delete(d.peers, w.PeerIDs[k])
			d.unloaded = append(d.unloaded, w.PeerIDs[k])
			return nil
		})
	case WorkPrepareDescriptors:
		for k := range w.Dlists {
			if e, ok := items[k]; ok {
				res.DlistResults = append(res.DlistResults, sdk.DlistResult{Err: e})
				continue
			}
			id := sdk.DlistID(d.id())
			d.dlists[id] = true
			if p := w.Dlists[k].Peer; p != 0 {
				d.dlistPeer[id] = p
			}
			res.DlistResults = append(res.DlistResults, sdk.DlistResult{ID: id})
		}
	case WorkReleaseDescriptors:
		res.Errs = errs(len(w.DlistIDs), func(k int) error {
			if !d.dlists[w.DlistIDs[k]] {
				return notFound("dlist", uint64(w.DlistIDs[k]))
			}
			delete(d.dlists, w.DlistIDs[k])
			delete(d.dlistPeer, w.DlistIDs[k])
			return nil
		})
	case WorkClose:
		if !d.held().Zero() {
			return res, sdk.Errorf(sdk.CodeBusy, "double: close with %+v held", d.held())
		}
		d.closed = true
	}
	if whole != nil {
		return Result{}, whole.whole // it took effect, and the caller cannot know
	}
	return res, nil
}

// workItems counts w's items, for faults counted over the double's life.
func workItems(w Work) int {
	switch w.Kind {
	case WorkPost:
		return len(w.Posts)
	case WorkPoll, WorkRelease, WorkCancel:
		return len(w.Handles)
	case WorkSendNotifications:
		return len(w.Notes)
	case WorkRegisterMemory:
		return len(w.Regions)
	case WorkDeregisterMemory:
		return len(w.RegionIDs)
	case WorkLoadPeers:
		return len(w.Peers)
	case WorkUnloadPeers:
		return len(w.PeerIDs)
	case WorkPrepareDescriptors:
		return len(w.Dlists)
	case WorkReleaseDescriptors:
		return len(w.DlistIDs)
	}
	return 0
}

// deliveredTo are the messages delivered to the peer loaded as agent, in
// order.
func (d *double) deliveredTo(agent string) []string {
	var out []string
	for _, n := range d.delivered {
		if d.peerNames[n.Peer] == agent {
			out = append(out, string(n.Message))
		}
	}
	return out
}

// describeWork is a one-line, deterministic form of w.
func describeWork(w Work) string {
	var args []string
	switch w.Kind {
	case WorkPost:
		for _, p := range w.Posts {
			args = append(args, fmt.Sprintf("%v:%d%v->%d%v", p.Op, p.Local, p.LocalIndices, p.Remote, p.RemoteIndices))
		}
	case WorkPoll, WorkRelease, WorkCancel:
		for _, h := range w.Handles {
			args = append(args, fmt.Sprint(h))
		}
	case WorkSendNotifications:
		for _, n := range w.Notes {
			args = append(args, fmt.Sprintf("%d:%q", n.Peer, n.Message))
		}
	case WorkRegisterMemory:
		for _, r := range w.Regions {
			args = append(args, fmt.Sprintf("%s+%d", r.Path, r.Length))
		}
	case WorkDeregisterMemory:
		for _, r := range w.RegionIDs {
			args = append(args, fmt.Sprint(r))
		}
	case WorkLoadPeers:
		for _, p := range w.Peers {
			args = append(args, p.Name)
		}
	case WorkUnloadPeers:
		for _, p := range w.PeerIDs {
			args = append(args, fmt.Sprint(p))
		}
	case WorkPrepareDescriptors:
		for _, l := range w.Dlists {
			args = append(args, fmt.Sprintf("peer%d/%d", l.Peer, len(l.Descriptors)))
		}
	case WorkReleaseDescriptors:
		for _, l := range w.DlistIDs {
			args = append(args, fmt.Sprint(l))
		}
	}
	return fmt.Sprintf("e%d %v [%s]", w.Epoch, w.Kind, strings.Join(args, " "))
}

// maxWorkSteps bounds the Ready-Done exchanges one command or round needs.
const maxWorkSteps = 1000

// srigBlocks is the size of a srig's pool, and of every peer rank's
// (peerSpec).
const srigBlocks = 8

// srig is a Core over doubles (one per epoch) with one pool of srigBlocks
// blocks. Every command runs the Work it hands out to its end,
// synchronously.
type srig struct {
	t     testingT
	c     *Core
	d     *double // the attached epoch's
	ds    map[Epoch]*double
	dead  map[Epoch]bool
	pool  PoolID
	now   time.Time
	seen  map[RequestID]int
	stash Ready
	all   Ready
	// tamper, when set, edits a call's result before core sees it (a
	// transport that answers short, ...).
	tamper func(w Work, res *Result)
}

func newSrig(t testingT, cfg Config, mod func(d *double)) *srig {
	t.Helper()
	c, err := New(cfg)
	require.NoError(t, err)
	s := &srig{t: t, c: c, ds: map[Epoch]*double{}, dead: map[Epoch]bool{}, now: t0, seen: map[RequestID]int{}}
	s.attach(1, mod)
	s.pool, err = c.RegisterPool(PoolSpec{Path: "kv", BlockSize: 64, Blocks: srigBlocks})
	require.NoError(t, err)
	s.settle()
	ok, err := c.PoolReady(s.pool)
	require.NoError(t, err)
	require.True(t, ok)
	return s
}

// attach attaches a fresh double as epoch e.
func (s *srig) attach(e Epoch, mod func(d *double)) {
	s.t.Helper()
	d := newDouble()
	if mod != nil {
		mod(d)
	}
	require.NoError(s.t, s.c.Attach(e, d.desc, true))
	s.ds[e], s.d = d, d
	s.settle()
}

// drive runs rd's Work and what follows to the end and returns every report.
func (s *srig) drive(rd Ready) Ready {
	all := rd
	all.Work = nil
	// Each command or round hands out a bounded amount of Work: a host
	// that kept running Work for one command would spin without end.
	steps := 0
	for work := rd.Work; len(work) > 0; {
		steps++
		require.Less(s.t, steps, maxWorkSteps, "core keeps handing out Work: %v", work)
		for _, w := range work {
			d := s.ds[w.Epoch]
			if d == nil || s.dead[w.Epoch] {
				s.c.Done(w.ID, Result{}, sdk.Errorf(sdk.CodePluginShutdown, "epoch %d is dead", w.Epoch))
				continue
			}
			res, err := d.exec(w)
			if s.tamper != nil {
				s.tamper(w, &res)
			}
			s.c.Done(w.ID, res, err)
		}
		next := s.c.Ready()
		work = next.Work
		all = mergeReady(all, next)
	}
	return all
}

func (s *srig) settle() { s.stash = mergeReady(s.stash, s.drive(s.c.Ready())) }

// poll runs a round; it fails the test on a second report of any request.
func (s *srig) poll() Ready {
	s.t.Helper()
	rd := mergeReady(s.stash, s.drive(s.c.Poll(s.now)))
	s.stash = Ready{}
	for _, id := range slices.Concat(rd.FinishedSending, rd.FinishedReceiving, failedIDs(rd)) {
		s.seen[id]++
		require.LessOrEqual(s.t, s.seen[id], 1, "request %q reported twice", id)
	}
	s.all = mergeReady(s.all, rd)
	return rd
}

// reported runs a round that must report id (or find it reported
// before), and returns it.
func (s *srig) reported(id RequestID) Ready {
	s.t.Helper()
	rd := s.poll()
	require.Equal(s.t, 1, s.seen[id], "%q not reported; stats %+v", id, s.c.Stats())
	return rd
}

// done makes every running handle of the attached transport DONE.
func (s *srig) done() {
	for _, h := range s.d.live() {
		if !s.d.handles[h].Terminal() {
			s.d.set(h, sdk.StateDone, nil)
		}
	}
}

// kill fences epoch e: its process is dead.
func (s *srig) kill(e Epoch) {
	s.dead[e] = true
	s.c.Fenced(e)
}

// openSrig is newSrig whose Core is shut down at the test's end as a host
// going down does it (shutdown).
func openSrig(t *testing.T, cfg Config, mod func(d *double)) *srig {
	t.Helper()
	s := newSrig(t, cfg, mod)
	t.Cleanup(s.shutdown)
	return s
}

// shutdown closes the Core, polling while Close is refused: each transfer
// still running on a live transport ends DONE meanwhile, as every transfer
// does in the end (a stall of the fake ends at its time), and the clock
// reaches the next lease (a send or receive Close failed waits for its
// lease to be reported). Close must then succeed, and every live transport
// must hold nothing and be closed.
func (s *srig) shutdown() {
	s.t.Helper()
	for range maxWorkSteps {
		if err := s.closeCore(); err == nil {
			break
		}
		for e, d := range s.ds {
			if s.dead[e] {
				continue
			}
			for _, h := range d.live() {
				if !d.handles[h].Terminal() {
					d.set(h, sdk.StateDone, nil)
				}
			}
		}
		if at := s.c.next().At; at.After(s.now) {
			s.now = at
		}
		s.poll()
	}
	require.NoError(s.t, s.closeCore(), "Close still refused")
	s.poll()
	for e, d := range s.ds {
		if s.dead[e] {
			continue // a dead process holds nothing
		}
		require.True(s.t, d.held().Zero(), "epoch %d still holds %+v", e, d.held())
		require.True(s.t, d.closed, "epoch %d was not closed", e)
	}
}

// connectPeer connects ps and returns the handshake's error: the
// handshake_failed Alert's.
func (s *srig) connectPeer(ps PeerSpec) error {
	s.t.Helper()
	if err := s.c.ConnectPeer(ps); err != nil {
		return err
	}
	before := len(s.stash.Alerts)
	s.settle()
	for _, a := range s.stash.Alerts[before:] {
		if a.Kind == "handshake_failed" && a.Peer == ps.Name {
			return a.Err
		}
	}
	return nil
}

// peer is a PeerSpec of n ranks of 8 blocks each (notifyOnly ranks none).
func peerSpec(name string, n int, notifyOnly ...int) PeerSpec {
	ps := PeerSpec{Name: name}
	for i := range n {
		rs := RankSpec{Agent: fmt.Sprintf("%s%d", name, i), Metadata: []byte("md"), Region: 1, BlockSize: 64, Blocks: srigBlocks}
		if slices.Contains(notifyOnly, i) {
			rs.Blocks = 0
		}
		ps.Ranks = append(ps.Ranks, rs)
	}
	return ps
}

func (s *srig) connect(ps PeerSpec) {
	s.t.Helper()
	require.NoError(s.t, s.c.ConnectPeer(ps))
	s.settle()
}

// readSpec reads one block per part (rank k's block k into a fresh block).
func (s *srig) readSpec(id RequestID, peer string, parts int) (ReadSpec, []BlockRef) {
	s.t.Helper()
	spec := ReadSpec{Request: id, Token: tok(id), Peer: peer}
	var blocks []BlockRef
	for k := range parts {
		b, err := s.c.Alloc(s.pool, 1)
		require.NoError(s.t, err)
		spec.Parts = append(spec.Parts, Part{Pool: s.pool, Local: b, Rank: k, Remote: []uint32{uint32(k)}})
		blocks = append(blocks, BlockRef{s.pool, b[0]})
	}
	return spec, blocks
}

// read issues readSpec's read and runs its Work.
func (s *srig) read(id RequestID, peer string, parts int) []BlockRef {
	s.t.Helper()
	spec, blocks := s.readSpec(id, peer, parts)
	require.NoError(s.t, s.do(s.c.Read(s.now, spec)))
	return blocks
}

// do runs the Work of the command that returned err, and returns err:
// s.do(s.c.Write(s.now, spec)).
func (s *srig) do(err error) error {
	s.settle()
	return err
}

func (s *srig) owners(blocks []BlockRef) []Owner {
	out := make([]Owner, len(blocks))
	for i, b := range blocks {
		out[i] = s.c.Owner(b)
	}
	return out
}

// handles are the double's live handles, in order.
func (d *double) live() []sdk.HandleID {
	var out []sdk.HandleID
	for h := range d.handles {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

// count counts the calls of kind so far.
func (d *double) count(kind WorkKind) int {
	n := 0
	for _, c := range d.calls {
		if strings.HasPrefix(c[strings.Index(c, " ")+1:], kind.String()+" ") {
			n++
		}
	}
	return n
}
