package core

import (
	"fmt"
	"strings"

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
	calls    []string // every call, "Kind [args]", in order (none when quiet)
	quiet    bool     // the explorer's replays: no calls kept
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
	if !d.quiet {
		d.calls = append(d.calls, describeWork(w))
	}
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
			a := fmt.Sprintf("%v:%d%v->%d%v", p.Op, p.Local, p.LocalIndices, p.Remote, p.RemoteIndices)
			if len(p.Notification) > 0 {
				a += fmt.Sprintf("+%q", p.Notification) // delivered once it is DONE
			}
			args = append(args, a)
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
