// Package host is custody's runtime: one Host per engine rank owns every
// transfer resource of that rank. It drives core from one owner goroutine,
// runs the transport as a child process and fences it (kills it and starts
// another) when the process dies or core asks, serves the engine API and
// publishes this rank's metadata to its peers.
package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/host/group"
	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
)

const (
	// maxPollBackoff caps the wait between rounds while something is in
	// flight and the transport cannot wake the host (sdk.Waker): a round
	// runs at once after a command or a round that made progress, and the
	// wait doubles from minPollBackoff after each round that made none.
	minPollBackoff = 10 * time.Microsecond
	maxPollBackoff = time.Millisecond
	// restartBackoff spaces attempts to start a transport after one failed.
	restartBackoff = time.Second
	// closeGrace bounds how long Run's shutdown waits for running transfers
	// to stop before it fences the transport instead.
	closeGrace = 10 * time.Second
)

// ErrClosed is returned by engine calls once the host has stopped.
var ErrClosed = errors.New("host stopped")

// ErrRestarting is returned by engine calls that need the transport while it
// restarts after a fence; retry them.
var ErrRestarting = errors.New("transport restarting; retry")

// ErrConnecting is returned by engine calls that need a peer connected while
// its handshake runs; retry them.
var ErrConnecting = errors.New("peer handshake in progress; retry")

// Host is one custody host. Create it with New, run it with Run; every engine
// call is handed to Run's owner goroutine, the only one that touches core.
type Host struct {
	cfg     *Config
	log     hclog.Logger
	metrics *Metrics
	state   *hostState // locked for the host's life (orphan.go)
	trust   *peerTrust // this host's TLS identity and CA (trust.go), set by Serve

	// Owner goroutine state: touched only inside Run and the commands it runs.
	core      *core.Core
	tp        process
	epoch     core.Epoch
	desc      sdk.Description
	pools     []poolEntry // PoolID-1 indexes
	links     map[string]*link
	reqs      map[core.RequestID]reqInfo
	blockReq  map[core.BlockRef]core.RequestID // ranked hosts: each tracked block's request
	rep       outbox                           // safe for concurrent use; the engine API reads it directly
	restartAt time.Time
	lastStats time.Time
	fences    uint64
	restarts  uint64
	metaAddr  string                         // set by Serve before its ready callback
	metrAddr  string                         // likewise, when metrics are served
	engineLn  atomic.Pointer[engineListener] // set by Serve once the engine socket listens

	// Round scheduling (owner goroutine): wake is the transport's wake-up
	// channel when it has one (sdk.Waker); backoff the wait before the
	// next round while something is in flight.
	wake    <-chan struct{}
	backoff time.Duration
	// missed: a round came (a wake-up, a command) while the previous
	// round's queries were still out, so core skipped its queries; the
	// next round runs as soon as they are reported, or the change that
	// wake-up announced would wait for the next deadline.
	missed bool

	exec *executor
	// submitted counts the Work handed to the executor, reported the
	// results of it handed to core (queued: the difference). local holds
	// the results of Work answered on the owner goroutine (local.go),
	// which happens only while nothing is queued; draining is set while
	// absorb hands them to core.
	submitted, reported uint64
	local               []workResult
	draining            bool
	// A round asked for while Work is queued runs once that Work is
	// reported (roundNowOrAfterQueued): woken, and wokeAt, what submitted
	// was when it was asked for.
	woken  bool
	wokeAt uint64

	// The rank group (nil for a host that decides alone) and the mode its
	// ranks agreed on; ranks holds finished requests back until every
	// rank is terminal (ranks.go).
	group *group.Group
	mode  group.Mode
	ranks *rankSync

	cmds       chan command
	handshakes chan handshake
	done       chan struct{}
	info       atomic.Pointer[PeerInfo]

	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
}

// process is a running transport process: the contract, and what fencing
// needs (sdk/plugin's Plugin).
type process interface {
	sdk.Transport
	Kill() error
	Stop()
	Exited() <-chan struct{}
	Pid() int
}

type poolEntry struct {
	name string
	spec core.PoolSpec
}

// reqInfo is what the host remembers of an open request for its metrics.
type reqInfo struct {
	peer  string
	op    string
	bytes uint64
	// On a ranked host: the request's blocks, and whether it receives
	// into them (ranks_hold.go).
	blocks []core.BlockRef
	recv   bool
}

type command struct {
	fn    func(ctx context.Context) error
	reply chan error
	// kick: the command may have created transport work (a post, a cancel,
	// a notification awaited), so a round runs at once after it.
	kick bool
}

// New starts the configured transport, attaches it as epoch 1 and registers
// the configured pools. Call Run next; on error nothing is left running.
func New(ctx context.Context, cfg *Config, log hclog.Logger) (*Host, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	c, err := core.New(core.Config{HoldCap: cfg.Escalation.Cap, Escalation: escalation(cfg.Escalation.Policy)})
	if err != nil {
		return nil, err
	}
	h := &Host{
		cfg:        cfg,
		log:        log,
		metrics:    NewMetrics(),
		core:       c,
		links:      map[string]*link{},
		reqs:       map[core.RequestID]reqInfo{},
		blockReq:   map[core.BlockRef]core.RequestID{},
		cmds:       make(chan command),
		handshakes: make(chan handshake),
		done:       make(chan struct{}),
	}
	h.bgCtx, h.bgCancel = context.WithCancel(context.Background())
	h.exec = newExecutor(cfg.Transport.CallTimeout)
	// Every failure below undoes what was built, in rule 12's order: the
	// transport (and with it every registration) before the rank group,
	// the state directory last.
	fail := func(err error) (*Host, error) {
		if h.tp != nil {
			_ = h.tp.Kill()
			h.tp = nil
		}
		h.bgCancel()
		h.exec.close()
		if h.group != nil {
			_ = h.group.Close()
		}
		h.state.close()
		return nil, err
	}
	if h.state, err = openState(cfg, log); err != nil {
		h.bgCancel()
		h.exec.close()
		return nil, err
	}
	if cfg.Ranked() {
		if h.group, h.mode, err = joinGroup(ctx, cfg, h.state, log); err != nil {
			return fail(err)
		}
		h.ranks = newRankSync(h)
	}
	if err := h.start(ctx); err != nil {
		return fail(err)
	}
	for _, p := range cfg.Pools {
		if _, err := h.registerPool(ctx, p.Name, core.PoolSpec{Path: p.Path, BlockSize: p.BlockSize, Blocks: uint32(p.Blocks)}); err != nil {
			return fail(fmt.Errorf("config: pools: %w", err))
		}
	}
	return h, nil
}

func escalation(policy string) core.EscalationPolicy {
	if policy == PolicyReleaseAndReuse {
		return core.EscalateReleaseAndReuse
	}
	return core.EscalateFence
}

// MetadataAddr is the peer metadata endpoint's address once Serve listens.
func (h *Host) MetadataAddr() string { return h.metaAddr }

// MetricsAddr is the metrics endpoint's address once Serve listens, or "".
func (h *Host) MetricsAddr() string { return h.metrAddr }

// Metrics are this host's Prometheus series.
func (h *Host) Metrics() *Metrics { return h.metrics }

// Info is what this host publishes to its peers now; ok is false while its
// transport restarts.
func (h *Host) Info() (PeerInfo, bool) {
	p := h.info.Load()
	if p == nil {
		return PeerInfo{}, false
	}
	return *p, true
}

// Run is the owner loop. It returns when ctx ends, after tearing down in
// rule 12's order: sessions, then pools, then the transport.
//
// Rounds are event-driven: one runs at once after a command that may have
// created transport work, after a handshake settles, after a fence, and
// whenever the transport wakes the host (sdk.Waker); the round after such a
// command or wake-up waits, while Work is at the executor, until that Work
// is reported (roundNowOrAfterQueued). While something is in
// flight and the transport cannot wake the host, rounds follow each other
// with a backoff that starts at zero and doubles to maxPollBackoff while
// they make no progress. An idle host runs a round only at the next lease
// or hold-cap deadline, so it makes no transport call meanwhile.
func (h *Host) Run(ctx context.Context) error {
	defer close(h.done)
	if h.group != nil {
		// Last, after the transport stopped: the other ranks see this
		// rank leave only once nothing of it can move.
		defer func() { _ = h.group.Close() }()
		h.ranks.start()
		defer h.ranks.stop()
	}
	defer h.exec.close()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		due := false
		select {
		case <-ctx.Done():
			return h.shutdown()
		case r := <-h.exec.results:
			// A result: act on it at once (a handle seen DONE is released
			// in the Work that follows); no round unless it was a round's
			// or a wake-up waited for it.
			if h.done1(r) {
				h.backoff = 0
			}
			woke := h.woken && h.reported >= h.wokeAt
			if woke {
				h.woken = false
			}
			if (woke || h.missed) && !h.core.Polling() {
				h.round()
			}
			h.schedule(t)
			continue
		case c := <-h.cmds:
			cctx, cancel := h.callCtx()
			c.reply <- c.fn(cctx)
			cancel()
			h.absorb(h.core.Ready())
			if c.kick {
				due = h.roundNowOrAfterQueued()
			}
		case hs := <-h.handshakes:
			h.settle(hs)
			due = true
		case <-h.exited():
			h.fence("transport process exited")
			due = true
		case <-h.wake:
			due = h.roundNowOrAfterQueued()
		case <-t.C:
			due = true
		}
		if due {
			h.round()
		}
		h.schedule(t)
	}
}

// roundNowOrAfterQueued is the round a command or a wake-up asks for: now
// when nothing is at the executor, else (woken) once what is there now is
// reported. Its queries would have waited behind that Work at the executor
// anyway, and after it they are answered locally (local.go); usually the
// wake-up announces the completion of the very post the executor reports.
func (h *Host) roundNowOrAfterQueued() bool {
	if h.queued() == 0 {
		return true
	}
	h.woken, h.wokeAt = true, h.submitted
	return false
}

// queued is how much Work the executor has whose result core lacks.
func (h *Host) queued() uint64 { return h.submitted - h.reported }

// done1 hands core one Work's result and absorbs what follows; it reports
// whether that was progress (a report, or more Work: a release, a post).
// A round's query that changed nothing doubles the poll backoff.
func (h *Host) done1(r workResult) bool {
	h.reported++
	return h.apply(r)
}

// apply is done1 for a result of either origin, the executor or runLocal.
func (h *Host) apply(r workResult) bool {
	h.core.Done(r.id, r.res, r.err)
	rd := h.core.Ready()
	progress := !rd.Empty()
	h.absorb(rd)
	if !progress && !h.core.Polling() {
		h.backoff = min(max(2*h.backoff, minPollBackoff), maxPollBackoff)
	}
	return progress
}

// await hands core the results of Work until cond holds or ctx ends. It runs
// on the owner goroutine, for setup (a pool's registration, a new epoch's)
// that an engine call or a restart must see done before it answers.
func (h *Host) await(ctx context.Context, cond func() bool) error {
	for !cond() {
		if h.core.Outstanding() == 0 {
			return fmt.Errorf("waiting for the transport: nothing is under way and the condition does not hold")
		}
		select {
		case r := <-h.exec.results:
			h.done1(r)
		case <-ctx.Done():
			return fmt.Errorf("waiting for the transport: %w", ctx.Err())
		}
	}
	return nil
}

// schedule arms t for the next round: after the backoff while core has work
// only a round can advance (with a waking transport, only work no wake-up
// announces), else at the next deadline, else not at all.
func (h *Host) schedule(t *time.Timer) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	// While a round's queries are out, their results schedule the next.
	poll := !h.core.Polling() && (h.core.Retrying() || (h.wake == nil && h.core.Busy()))
	if poll {
		t.Reset(h.backoff)
		return
	}
	var at time.Time
	if d, ok := h.core.NextDeadline(); ok {
		at = d
	}
	if h.tp == nil && (at.IsZero() || h.restartAt.Before(at)) {
		at = h.restartAt
	}
	if at.IsZero() {
		return
	}
	t.Reset(max(time.Until(at), 0))
}

// do runs fn on the owner goroutine and returns its error. It gives up when
// ctx ends or the host stops before the owner takes the command; once taken,
// the command runs to its end (bounded by the call timeout) and do waits for
// it, so the caller never hears "failed" of something that took effect (a
// report taken, a request recorded).
func (h *Host) do(ctx context.Context, fn func(ctx context.Context) error) error {
	return h.send(ctx, command{fn: fn, reply: make(chan error, 1)})
}

// doWork is do for a command that may create transport work: a round runs
// at once after it.
func (h *Host) doWork(ctx context.Context, fn func(ctx context.Context) error) error {
	return h.send(ctx, command{fn: fn, reply: make(chan error, 1), kick: true})
}

func (h *Host) send(ctx context.Context, c command) error {
	select {
	case h.cmds <- c:
	case <-h.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-c.reply
}

func (h *Host) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), h.cfg.Transport.CallTimeout)
}

func (h *Host) exited() <-chan struct{} {
	if h.tp == nil {
		return nil
	}
	return h.tp.Exited()
}

// round starts one core round (its queries go to the executor) and absorbs
// what it reports.
func (h *Host) round() {
	if h.tp == nil {
		h.restart()
	}
	h.missed = h.core.Polling() // core skips its queries: run again once they are in
	h.absorb(h.core.Poll(time.Now()))
	if now := time.Now(); now.Sub(h.lastStats) > 100*time.Millisecond {
		h.lastStats = now
		h.metrics.observe(h.core.Stats())
	}
}

// absorb hands core's Work to the executor, logs its alerts, acts on its
// fence requests and adds its finished report to the one the engine will
// fetch; and again for what acting on it produced (a peer removed, ...).
// The results of Work answered locally meanwhile go to core before it
// returns, with what follows from them.
func (h *Host) absorb(rd core.Ready) {
	h.absorbReady(rd)
	if h.draining {
		return // an outer absorb is handing them over
	}
	h.draining = true
	for i := 0; i < len(h.local); i++ { // apply may append more
		if h.apply(h.local[i]) {
			h.backoff = 0
		}
	}
	clear(h.local)
	h.local = h.local[:0]
	h.draining = false
}

func (h *Host) absorbReady(rd core.Ready) {
	for {
		h.absorb1(rd)
		more := h.core.Ready()
		last := len(more.Work) == 0 && len(more.FinishedSending) == 0 && len(more.FinishedReceiving) == 0 && len(more.Failed) == 0
		if last {
			h.absorb1(more)
			return
		}
		rd = more
	}
}

func (h *Host) absorb1(rd core.Ready) {
	jobs := make([]job, 0, len(rd.Work))
	for _, w := range rd.Work {
		j := job{w: w}
		if w.Epoch == h.epoch && h.tp != nil {
			j.tp, j.most = h.tp, callItems(h.desc)
			// With nothing at the executor, nothing handed out before w
			// is unanswered: w may be answered here without reordering.
			if h.queued() == 0 && len(jobs) == 0 {
				if r, ok := runLocal(h.tp, w); ok {
					h.local = append(h.local, r)
					continue
				}
			}
		}
		jobs = append(jobs, j)
	}
	h.submitted += uint64(len(jobs))
	h.exec.submit(jobs...)
	for _, a := range rd.Alerts {
		h.alert(a)
	}
	for _, e := range rd.Fence {
		if e == h.epoch && h.tp != nil {
			h.fence("core asked for a fence: a transfer was held past the cap, a call's outcome is unknown or the transport is wedged")
		} else {
			h.core.Fenced(e) // that process is already dead
		}
	}
	// A ranked host holds the requests finished here back for the group
	// (holdBack), but is done with them all the same: what the group's
	// outcome needs, holdBack copied.
	finished := rd
	if h.ranks != nil {
		rd = h.holdBack(rd)
	}
	h.rep.add(rd)
	rd = finished
	// A request held back for the group is counted by its union outcome,
	// when the rank sync reports it (ranks.go), not by its outcome here.
	done := func(id core.RequestID, outcome string) {
		ri := h.reqs[id]
		h.untrack(id)
		delete(h.reqs, id)
		if h.ranks == nil {
			h.metrics.countRequest(outcome, ri.op, ri.bytes)
		}
	}
	for _, id := range rd.FinishedSending {
		done(id, "ok")
	}
	for _, id := range rd.FinishedReceiving {
		done(id, "ok")
	}
	for _, f := range rd.Failed {
		peer := h.reqs[f.Request].peer
		done(f.Request, "failed")
		if errors.Is(f.Reason, sdk.ErrRemoteDisconnect) && peer != "" {
			h.dropStalePeer(peer)
		}
	}
}

// callItems is how many items one batched call to a transport of desc may
// carry: what it states, within what core puts in one call.
func callItems(desc sdk.Description) int {
	if m := int(desc.Limits.MaxItemsPerCall); m > 0 && m < core.DefaultBatch {
		return m
	}
	return core.DefaultBatch
}

func (h *Host) alert(a core.Alert) {
	h.metrics.Failures.WithLabelValues(a.Kind).Inc()
	if a.Kind == "hold_cap_fence" || a.Kind == "transfer_force_released" {
		h.metrics.Escalations.Inc()
	}
	args := []any{"failure_type", a.Kind}
	if a.Peer != "" {
		args = append(args, "peer", a.Peer)
	}
	if a.Request != "" {
		args = append(args, "request", string(a.Request))
	}
	if a.Handle != (core.Ref{}) {
		args = append(args, "handle", a.Handle.String())
	}
	if a.Err != nil {
		args = append(args, "error", a.Err.Error())
	}
	if a.Level == core.AlertError {
		h.log.Error("transfer failure", args...)
	} else {
		h.log.Warn("transfer failure", args...)
	}
}

// fence kills the transport process, so every transfer it initiated stops,
// tells core the epoch is fenced and starts a new transport.
func (h *Host) fence(why string) {
	e := h.epoch
	h.log.Error("fencing transport", "failure_type", "transport_fenced", "epoch", uint64(e), "reason", why)
	h.info.Store(nil)
	if h.tp != nil {
		if err := h.tp.Kill(); err != nil {
			// Not proven dead: its registrations may live on. Keep it; the
			// next round asks again, and its exit fences it.
			h.log.Error("kill transport", "failure_type", "transport_kill_failed", "epoch", uint64(e), "error", err.Error())
			return
		}
		h.tp, h.wake = nil, nil
	}
	h.core.Fenced(e)
	h.fences++
	h.metrics.Fences.Inc()
	// Peers are loaded again on demand: core dropped them with the epoch,
	// and a handshake still running lands in the new one.
	h.restart()
	if h.tp != nil {
		h.restarts++
		h.metrics.Restarts.Inc()
	}
}

// restart starts a transport as the next epoch; on failure it retries after
// restartBackoff, and engine calls fail meanwhile.
func (h *Host) restart() {
	if time.Now().Before(h.restartAt) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), plugin.DefaultStartTimeout)
	defer cancel()
	if err := h.start(ctx); err != nil {
		h.restartAt = time.Now().Add(restartBackoff)
		h.log.Error("start transport", "failure_type", "transport_start_failed", "error", err.Error())
	}
}

// start launches the transport as epoch h.epoch+1 and attaches it.
func (h *Host) start(ctx context.Context) error {
	next := h.epoch + 1
	h.epoch = next
	pl, err := startTransport(ctx, h.state.transportConfig(h.cfg.Transport), fmt.Sprintf("%s.%d", h.cfg.Name, next), h.log.Named("transport"))
	if err != nil {
		return err
	}
	if err := h.state.recordTransport(pl.Pid()); err != nil {
		_ = pl.Kill()
		return err
	}
	desc, err := pl.Describe(ctx)
	if err != nil {
		_ = pl.Kill()
		return fmt.Errorf("describe transport epoch %d: %w", next, err)
	}
	if err := h.checkAgreed(uint64(next), desc); err != nil {
		_ = pl.Kill()
		return err
	}
	_, events := any(pl).(sdk.EventSource)
	if err := h.core.Attach(next, desc, events); err != nil {
		_ = pl.Kill()
		h.core.Fenced(next)
		return err
	}
	h.tp, h.desc = pl, desc
	h.wake = nil
	if w, ok := any(pl).(sdk.Waker); ok && !offRings(pl) {
		h.wake = w.Wake()
	}
	// The pools are registered again in this epoch before peers may see it.
	h.absorb(h.core.Ready())
	err = h.await(ctx, func() bool { return h.poolsReady(next) })
	if err == nil && h.core.Epoch() != next {
		err = fmt.Errorf("transport epoch %d was fenced while its pools were registered", next)
	}
	if err == nil {
		err = h.publish(ctx)
	}
	if err != nil {
		// Peers could never reach this epoch: end it, so restart retries.
		_ = pl.Kill()
		h.core.Fenced(next)
		h.tp, h.wake = nil, nil
		return err
	}
	return nil
}

// poolsReady reports whether every pool is registered in epoch, or the
// epoch is gone (fenced: a pool's registration failed).
func (h *Host) poolsReady(epoch core.Epoch) bool {
	if h.core.Epoch() != epoch {
		return true
	}
	for i := range h.pools {
		if ok, _ := h.core.PoolReady(core.PoolID(i + 1)); !ok {
			return false
		}
	}
	return true
}

// publish refreshes the PeerInfo peers fetch: the transport's metadata and
// every pool's region in this epoch.
func (h *Host) publish(ctx context.Context) error {
	md, err := h.tp.LocalMetadata(ctx)
	if err != nil {
		return fmt.Errorf("publish metadata: %w", err)
	}
	pools := make([]PoolLayout, len(h.pools))
	for i, p := range h.pools {
		region, _, err := h.core.PoolRegion(core.PoolID(i + 1))
		if err != nil {
			return fmt.Errorf("publish metadata: pool %q: %w", p.name, err)
		}
		pools[i] = PoolLayout{Name: p.name, BlockSize: p.spec.BlockSize, Blocks: uint64(p.spec.Blocks), Region: uint64(region)}
	}
	h.info.Store(&PeerInfo{
		Name:          h.cfg.Name,
		Agent:         fmt.Sprintf("%s.%d", h.cfg.Name, h.epoch),
		Transport:     h.desc.Name,
		ContractMajor: h.desc.ContractMajor,
		Epoch:         uint64(h.epoch),
		Metadata:      md,
		Pools:         pools,
		Compat:        CompatHash(h.desc.Name, h.desc.ContractMajor, pools),
	})
	return nil
}

// shutdown closes core until nothing is held (bounded by closeGrace, after
// which the transport is fenced instead), then ends the transport process.
func (h *Host) shutdown() error {
	h.bgCancel()
	defer h.bg.Wait()
	defer h.state.close()
	deadline := time.Now().Add(closeGrace)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var err error
	for {
		err = h.core.Close(time.Now())
		h.absorb(h.core.Ready())
		if err == nil || !errors.Is(err, core.ErrHeld) || time.Now().After(deadline) {
			break
		}
		if h.core.Outstanding() == 0 {
			h.round()
		}
		if h.core.Outstanding() > 0 {
			select {
			case r := <-h.exec.results:
				h.done1(r)
			case <-ctx.Done():
			}
		} else {
			time.Sleep(maxPollBackoff) // pacing between rounds with nothing under way
		}
	}
	h.info.Store(nil)
	if h.tp == nil {
		return err
	}
	if err != nil {
		h.log.Error("close with transfers still held: fencing", "failure_type", "close_fenced", "error", err.Error())
		if kerr := h.tp.Kill(); kerr != nil {
			return fmt.Errorf("shutdown: transfers still held and the transport could not be killed: %w", kerr)
		}
		h.core.Fenced(h.epoch)
		return nil
	}
	h.tp.Stop()
	return nil
}

// offRings reports whether tp is a plugin process whose shared-memory rings
// are not attached (refused, or turned off): its Waker then only ticks, so
// the host polls while work is in flight instead, and makes no call while
// idle.
func offRings(tp any) bool {
	r, ok := tp.(plugin.RingReporter)
	return ok && !r.Rings()
}
