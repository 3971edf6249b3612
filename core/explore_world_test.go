package core

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// world is a Core over scripted doubles whose Work stays outstanding until
// an input delivers its result: the explorer's model and the runtime of
// the async testdata scripts. Every input is one line of the script
// language (step), so a path of the explorer is a script. The world also
// keeps the ground truth the invariants are checked against: which handle
// touches which blocks, what each request was given, what was reported.
type world struct {
	cfg   exploreConfig
	c     *Core
	ds    map[Epoch]*double
	dead  map[Epoch]bool
	epoch Epoch
	pools []PoolID
	now   time.Time
	// out is the Work handed out and not yet delivered, in hand-out order.
	out []Work
	// issued are the requests core accepted, by id; order their ids.
	issued map[RequestID]*wreq
	order  []RequestID
	next   int // requests issued so far (accepted or not)
	closed bool
	// log is every Work handed out ("work") and delivered ("done"), and
	// every report, in order: what a script shows.
	log []string
	// touch is, per epoch and handle, what the handle's post reaches.
	touch map[Epoch]map[sdk.HandleID]*wpost
	// dlists and regions: per epoch, what each local dlist and region is.
	dlists  map[Epoch]map[sdk.DlistID]wdlist
	regions map[Epoch]map[sdk.RegionID]PoolID
	peerIDs map[Epoch]map[sdk.PeerID]string // loaded rank -> its peer's name
	resend  map[Epoch]*resendTruth          // rule 15 (explore_resend_test.go)
	// orphans: the epochs where a call that failed after taking effect
	// created something core cannot name (learn).
	orphans map[Epoch]bool
	// violation is the first invariant broken, "" while none is.
	violation string
	// quiet: the explorer's replays keep no log and render nothing (a
	// script is rendered from a fresh world, see script).
	quiet bool
}

// wreq is one accepted request: its kind, peer and blocks.
type wreq struct {
	id       RequestID
	kind     string // read, write, send, recv
	peer     string
	blocks   []BlockRef
	reported bool
	// notified: the notifications the explorer delivered for it.
	notified map[string]bool
	// done counts its handles that ended DONE; mustFail: one of them
	// failed, was canceled, or died with its transport while running, or
	// its peer was removed or the Core closed before it was reported.
	done     int
	mustFail bool
	at       time.Time // when it was issued: a send's or receive's lease counts from here
	notify   bool      // a read with NotifyProducer
}

// wpost is one posted handle: the blocks it touches, its dlists, and when
// its hold began (core learned of it, or its session closed).
type wpost struct {
	req    *wreq
	blocks []BlockRef
	local  sdk.DlistID
	remote sdk.DlistID
	at     time.Time
	orphan bool
}

// wdlist is one prepared dlist: local over a pool, or remote of a peer.
type wdlist struct {
	pool   PoolID
	peer   sdk.PeerID
	orphan bool
}

const exploreBlocks = 4

var exploreT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newWorld(cfg exploreConfig, quiet bool) (*world, error) {
	c, err := New(Config{HoldCap: cfg.holdCap, Escalation: cfg.policy})
	if err != nil {
		return nil, err
	}
	w := &world{cfg: cfg, c: c, quiet: quiet, ds: map[Epoch]*double{}, dead: map[Epoch]bool{}, now: exploreT0,
		issued: map[RequestID]*wreq{}, touch: map[Epoch]map[sdk.HandleID]*wpost{},
		dlists: map[Epoch]map[sdk.DlistID]wdlist{}, regions: map[Epoch]map[sdk.RegionID]PoolID{}, peerIDs: map[Epoch]map[sdk.PeerID]string{}, resend: map[Epoch]*resendTruth{}, orphans: map[Epoch]bool{}}
	if err := w.attach(); err != nil {
		return nil, err
	}
	for i := range cfg.pools {
		id, err := c.RegisterPool(PoolSpec{Path: fmt.Sprintf("kv%d", i), BlockSize: 64, Blocks: exploreBlocks})
		if err != nil {
			return nil, err
		}
		w.pools = append(w.pools, id)
	}
	w.collect(c.Ready())
	w.drain() // setup is not explored
	if w.violation != "" {
		return nil, fmt.Errorf("setup: %s", w.violation)
	}
	return w, nil
}

// attach starts a fresh double as the next epoch.
func (w *world) attach() error {
	w.epoch++
	d := newDouble()
	d.quiet = w.quiet
	d.desc.Capabilities.Events = w.cfg.events
	if w.cfg.initiatedOnly {
		d.desc.FenceScope = sdk.FenceInitiated
	}
	d.cancelTo = sdk.StateCanceled
	w.ds[w.epoch] = d
	w.touch[w.epoch] = map[sdk.HandleID]*wpost{}
	w.dlists[w.epoch] = map[sdk.DlistID]wdlist{}
	w.regions[w.epoch] = map[sdk.RegionID]PoolID{}
	w.peerIDs[w.epoch] = map[sdk.PeerID]string{}
	w.resend[w.epoch] = newResendTruth()
	return w.c.Attach(w.epoch, d.desc, true)
}

// collect takes a Ready: its Work joins out, its reports are checked and
// recorded.
func (w *world) collect(rd Ready) {
	for _, wk := range rd.Work {
		w.checkWork(wk)
		w.out = append(w.out, wk)
		if !w.quiet {
			w.log = append(w.log, fmt.Sprintf("work %d %s", wk.ID, describeWork(wk)))
		}
	}
	w.checkReports(rd)
}

// drain delivers every outstanding Work, and what follows, as the double
// answers it.
func (w *world) drain() {
	for steps := 0; len(w.out) > 0; steps++ {
		if steps > maxWorkSteps {
			w.fail("core keeps handing out Work: %v", w.out)
			return
		}
		w.deliver(0, nil, -1, nil)
	}
}

// deliver runs out[i] against its double, with whole as the call's error
// (applied: after it took effect) or itemErr for item k, and hands core
// the result.
func (w *world) deliver(i int, whole error, k int, itemErr error, applied ...bool) {
	wk := w.out[i]
	w.out = slices.Delete(w.out, i, i+1)
	if !w.quiet {
		w.log = append(w.log, fmt.Sprintf("done %d", wk.ID))
	}
	d := w.ds[wk.Epoch]
	if d == nil || w.dead[wk.Epoch] {
		w.c.Done(wk.ID, Result{}, sdk.Errorf(sdk.CodePluginShutdown, "epoch %d is dead", wk.Epoch))
		w.collect(w.c.Ready())
		return
	}
	switch {
	case whole != nil:
		d.failWhole(wk.Kind, whole, 1)
		d.faults[len(d.faults)-1].applied = len(applied) > 0 && applied[0]
	case itemErr != nil:
		d.failItem(wk.Kind, k, itemErr, 1)
	}
	first := d.next
	var running []sdk.HandleID
	if wk.Kind == WorkCancel {
		for _, h := range wk.Handles {
			if st, ok := d.handles[h]; ok && !st.Terminal() {
				running = append(running, h)
			}
		}
	}
	res, err := d.exec(wk)
	d.faults = d.faults[:0]
	for _, h := range running {
		if st := d.handles[h]; st.Terminal() {
			w.ended(wk.Epoch, h, st)
		}
	}
	if whole == nil || (len(applied) > 0 && applied[0]) {
		w.learn(wk, first, d.next, k, whole != nil)
	}
	w.sentResult(wk, whole, k, itemErr)
	w.c.Done(wk.ID, res, err)
	w.collect(w.c.Ready())
}

func (w *world) fail(format string, args ...any) {
	if w.violation == "" {
		w.violation = fmt.Sprintf(format, args...)
	}
}

// step applies one input line and returns its rendered output.
func (w *world) step(line string) (string, error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return "", fmt.Errorf("empty input")
	}
	a := map[string]string{}
	for _, kv := range f[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return "", fmt.Errorf("argument %q is not k=v", kv)
		}
		a[k] = v
	}
	logged := len(w.log)
	var errOut error
	switch f[0] {
	case "connect":
		n, _ := strconv.Atoi(a["ranks"])
		errOut = w.c.ConnectPeer(peerSpec(a["peer"], max(n, 1)))
		w.collect(w.c.Ready())
	case "remove":
		errOut = w.c.RemovePeer(w.now, a["peer"])
		if errOut == nil {
			w.resend[w.epoch].removed(a["peer"])
			w.retain(func(p *wpost) bool { return w.peerIDs[w.epoch][w.dlists[w.epoch][p.remote].peer] == a["peer"] })
			// Its requests fail (RemovePeer), whatever their handles do.
			w.mustFail(func(r *wreq) bool { return r.peer == a["peer"] })
		}
		w.collect(w.c.Ready())
	case "read", "write", "send", "recv":
		errOut = w.issue(f[0], RequestID(a["id"]), a["peer"], a["notify"] == "true")
	case "retry":
		errOut = w.retry(RequestID(a["id"]))
	case "run", "drain":
		if f[0] == "drain" {
			w.drain()
			break
		}
		id, err := strconv.ParseUint(a["w"], 10, 64)
		if err != nil {
			return "", fmt.Errorf("run: bad work id %q", a["w"])
		}
		i := slices.IndexFunc(w.out, func(x Work) bool { return x.ID == WorkID(id) })
		if i < 0 {
			return "", fmt.Errorf("run: work %d is not outstanding", id)
		}
		var whole, itemErr error
		k := -1
		if c, ok := exploreCode(a["whole"]); ok {
			whole = sdk.Errorf(c, "explore: injected %s", a["whole"])
		} else if c, ok := exploreCode(a["code"]); ok {
			k, _ = strconv.Atoi(a["item"])
			itemErr = sdk.Errorf(c, "explore: injected %s", a["code"])
		}
		w.deliver(i, whole, k, itemErr, a["applied"] == "true")
	case "state":
		h, _ := strconv.ParseUint(a["h"], 10, 64)
		st, ok := states[a["st"]]
		d := w.ds[w.epoch]
		if !ok || d == nil {
			return "", fmt.Errorf("state: bad state %q", a["st"])
		}
		if cur, ok := d.handles[sdk.HandleID(h)]; !ok || cur.Terminal() {
			return "", fmt.Errorf("state: handle %d is not running in epoch %d", h, w.epoch)
		}
		var reason error
		if st != sdk.StateDone {
			reason = sdk.Errorf(sdk.CodeBackend, "explore: handle ended %v", st)
		}
		d.set(sdk.HandleID(h), st, reason)
		w.ended(w.epoch, sdk.HandleID(h), st)
	case "notify":
		r := w.issued[RequestID(a["id"])]
		if r == nil {
			return "", fmt.Errorf("notify: no request %q", a["id"])
		}
		msg := ConsumedMessage(r.id, tok(r.id))
		if r.kind == "recv" {
			msg = WrittenMessage(r.id, tok(r.id))
		}
		r.notified[a["from"]] = true
		w.ds[w.epoch].inbox = append(w.ds[w.epoch].inbox, sdk.Notification{From: a["from"], Message: msg})
	case "poll", "round":
		before := len(w.out)
		w.collect(w.c.Poll(w.now))
		w.checkHolds()
		if f[0] == "round" {
			// A whole round: the queries it handed out (Notifications,
			// Events, Poll) answered as the double answers them; what
			// follows (a Release) stays outstanding.
			var ids []WorkID
			for _, wk := range w.out[before:] {
				if wk.Kind == WorkNotifications || wk.Kind == WorkEvents || wk.Kind == WorkPoll {
					ids = append(ids, wk.ID)
				}
			}
			for _, id := range ids {
				if i := slices.IndexFunc(w.out, func(x Work) bool { return x.ID == id }); i >= 0 {
					w.deliver(i, nil, -1, nil)
				}
			}
		}
	case "tick":
		d, err := time.ParseDuration(a["d"])
		if err != nil {
			return "", fmt.Errorf("tick: %w", err)
		}
		w.now = w.now.Add(d)
	case "kill":
		for _, h := range w.ds[w.epoch].live() {
			if !w.ds[w.epoch].handles[h].Terminal() {
				w.ended(w.epoch, h, sdk.StateFailed)
			}
		}
		w.dead[w.epoch] = true
		w.c.Fenced(w.epoch)
		w.collect(w.c.Ready())
	case "attach":
		errOut = w.attach()
		w.collect(w.c.Ready())
	case "close":
		if !w.c.closing {
			w.retain(func(*wpost) bool { return true })
		}
		errOut = w.c.Close(w.now)
		if errOut == nil {
			w.closed = true
		}
		// Every request not reported yet fails: the engine is going away.
		w.mustFail(func(*wreq) bool { return true })
		w.collect(w.c.Ready())
		if errOut == nil {
			w.checkClosed()
		}
	default:
		return "", fmt.Errorf("unknown input %q", f[0])
	}
	w.checkOwners()
	w.checkNatives()
	if w.quiet {
		return "", nil
	}
	return w.render(logged, errOut), nil
}

// issue makes request id of kind on peer, one block per rank of the peer
// from the pools in turn (a send or receive: from one pool).
func (w *world) issue(kind string, id RequestID, peer string, notify bool) error {
	w.next++
	ranks := w.cfg.ranks
	pool := w.pools[(w.next-1)%len(w.pools)]
	r := &wreq{id: id, kind: kind, peer: peer, notified: map[string]bool{}, at: w.now, notify: notify}
	var err error
	var parts []Part
	alloc := func(p PoolID, n int) ([]uint32, bool) {
		b, aerr := w.c.Alloc(p, n)
		if aerr != nil {
			err = aerr
			return nil, false
		}
		for _, x := range b {
			r.blocks = append(r.blocks, BlockRef{p, x})
		}
		return b, true
	}
	switch kind {
	case "read", "write":
		for k := range ranks {
			p := w.pools[(w.next-1+k)%len(w.pools)]
			b, ok := alloc(p, 1)
			if !ok {
				return err
			}
			parts = append(parts, Part{Pool: p, Local: b, Rank: k, Remote: []uint32{uint32(k)}})
		}
		if kind == "read" {
			err = w.c.Read(w.now, ReadSpec{Request: id, Token: tok(id), Peer: peer, Parts: parts, NotifyProducer: notify})
		} else {
			err = w.c.Write(w.now, WriteSpec{Request: id, Token: tok(id), Peer: peer, Parts: parts, Consumers: ranks, Lease: w.cfg.lease})
		}
	case "send":
		b, ok := alloc(pool, ranks)
		if !ok {
			return err
		}
		err = w.c.ExpectSend(w.now, SendSpec{Request: id, Token: tok(id), Peer: peer, Pool: pool, Blocks: b, Consumers: ranks, Lease: w.cfg.lease})
	case "recv":
		b, ok := alloc(pool, ranks)
		if !ok {
			return err
		}
		err = w.c.ExpectReceive(w.now, RecvSpec{Request: id, Token: tok(id), Peer: peer, Pool: pool, Blocks: b, Producers: ranks, Lease: w.cfg.lease})
	}
	if err != nil {
		// Refused: the blocks are the engine's still; give them back.
		for _, b := range r.blocks {
			if w.c.Owner(b) == OwnerEngine {
				_ = w.c.Free(b.Pool, []uint32{b.Block})
			}
		}
		return err
	}
	w.issued[id] = r
	w.order = append(w.order, id)
	w.collect(w.c.Ready())
	return nil
}

// retry repeats request id's call, with its id, token and kind, on blocks
// of its own: the retry of a call whose reply was lost. Core must refuse it
// (ErrDuplicate) and change nothing, whether the request is in flight or
// reported (rule 16: taken as new, its blocks would move twice).
func (w *world) retry(id RequestID) error {
	r := w.issued[id]
	if r == nil {
		return fmt.Errorf("retry: no request %q", id)
	}
	n := w.cfg.ranks
	b, err := w.c.Alloc(w.pools[0], n)
	if err != nil {
		return nil // no blocks to retry with
	}
	before := w.c.Stats()
	var parts []Part
	for k := range n {
		parts = append(parts, Part{Pool: w.pools[0], Local: b[k : k+1], Rank: k, Remote: []uint32{uint32(k)}})
	}
	switch r.kind {
	case "read":
		err = w.c.Read(w.now, ReadSpec{Request: id, Token: tok(id), Peer: r.peer, Parts: parts, NotifyProducer: r.notify})
	case "write":
		err = w.c.Write(w.now, WriteSpec{Request: id, Token: tok(id), Peer: r.peer, Parts: parts, Consumers: n, Lease: w.cfg.lease})
	case "send":
		err = w.c.ExpectSend(w.now, SendSpec{Request: id, Token: tok(id), Peer: r.peer, Pool: w.pools[0], Blocks: b, Consumers: n, Lease: w.cfg.lease})
	case "recv":
		err = w.c.ExpectReceive(w.now, RecvSpec{Request: id, Token: tok(id), Peer: r.peer, Pool: w.pools[0], Blocks: b, Producers: n, Lease: w.cfg.lease})
	}
	if !errors.Is(err, ErrDuplicate) {
		w.fail("rule 16: the retry of %s %q (its id and token; reported %v) was not refused as a duplicate: %v", r.kind, id, r.reported, err)
	} else if after := w.c.Stats(); after != before {
		w.fail("rule 16: the refused retry of %s %q changed the Core: %+v, then %+v", r.kind, id, before, after)
	}
	if ferr := w.c.Free(w.pools[0], b); ferr != nil {
		w.fail("rule 16: the blocks of the refused retry of %q are not the engine's: %v", id, ferr)
	}
	w.collect(w.c.Ready())
	return err
}

// exploreCode is the code a script names: those of codes, and CANCELED
// (allCodes offers it), which codes lacks.
func exploreCode(name string) (sdk.Code, bool) {
	if name == "CANCELED" {
		return sdk.CodeCanceled, true
	}
	c, ok := codes[name]
	return c, ok
}

// render is what a step did since log entry logged: the Work it handed
// out and delivered and its reports, in order, and who holds the blocks.
func (w *world) render(logged int, errOut error) string {
	out := slices.Clone(w.log[logged:])
	if errOut != nil {
		out = append(out, "error: "+errOut.Error())
	}
	var owners strings.Builder
	for _, p := range w.pools {
		owners.WriteByte(' ')
		for b := range uint32(exploreBlocks) {
			owners.WriteByte("fetrq"[w.c.Owner(BlockRef{p, b})])
		}
	}
	out = append(out, "owners:"+owners.String())
	if w.violation != "" {
		out = append(out, "violation: "+w.violation)
	}
	return strings.Join(out, "\n")
}
