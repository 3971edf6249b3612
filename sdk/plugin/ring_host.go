package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/sdk"
)

// The host side of the rings. Plugin.Open attaches them (unless
// LaunchOptions.DisableRings); from then on Post, Release and
// SendNotifications travel through
// the submission ring and wait for their results in the completion ring,
// within the call's deadline, and Poll, Events and Notifications answer
// from what the completion ring brought:
//
//   - Poll: a handle posted through the rings and not released is in the
//     last terminal state the plugin reported, else IN_PROGRESS (the plugin
//     has not reported it terminal yet: the contract's answer for "cannot
//     tell"). Any other id is asked of the transport over gRPC, so unknown
//     and released ids get the transport's own answer.
//   - Release under release at terminal (LaunchOptions.ReleaseTerminal):
//     a handle the plugin reported released with its terminal state is
//     released from the record, without a call; the others go through
//     the rings as before. The whole call fails, and changes nothing, when
//     the part that went through them fails. Cancel of such a handle is
//     answered OK here, as the transport answers for a terminal handle.
//   - Events and Notifications: what the plugin forwarded, in order; when
//     nothing waits, one drain call through the rings asks the transport
//     now and returns its answer, errors included; unless the transport
//     is a Waker (prompt): the plugin then forwards what the transport
//     has as soon as it wakes, a forwarded change wakes Wake's channel,
//     and nothing is asked (a drain would cost a round trip through the
//     rings on every round of the host, for nothing).
//
// Whoever waits drains the completion ring itself (a caller spinning for
// its result, Poll); a reader goroutine drains it when nobody does, sleeping
// on the host's doorbell. While a caller drains (spins for its result, or
// Polls in a loop), the reader naps off its CPU (nap), and a Poll that
// finds nothing new gives up the CPU when it shares it with the plugin's
// pump (pollYield). Every completion that may change a handle's state or
// brings a notification wakes Wake's channel.
//
// A completion ring that breaks the protocol fences the transport: the
// process is killed (as Kill does), and every pending and later call
// returns ErrPluginShutdown naming the violation. Once the process is gone,
// every call returns ErrPluginShutdown as before.

// Host timing.
const (
	// ringWaitSpin is how long a caller drains the completion ring itself
	// before it blocks for its result.
	ringWaitSpin = 200 * time.Microsecond
	// ringReaderSpin is how long the reader goroutine keeps looking after
	// the last completion before it sleeps.
	ringReaderSpin = 20 * time.Microsecond
	// ringPollGap: Polls at most this far apart come from a caller
	// polling in a loop, which drains the completion ring itself (the
	// reader naps meanwhile).
	ringPollGap = 20 * time.Microsecond
	// ringCPUCheck is how long a Poll trusts the last look at whether
	// the host shares its CPU with the plugin's pump (pollYield).
	ringCPUCheck = 10 * time.Microsecond
	// fenceWait bounds how long a call that found the rings broken waits
	// for the fenced process to be gone.
	fenceWait = 10 * time.Second
)

// ringEpoch is the origin of ringClock.
var ringEpoch = time.Now()

// ringClock is a monotonic clock in nanoseconds, never 0.
func ringClock() int64 { return int64(time.Since(ringEpoch)) + 1 }

// ringHost is the host side of one mapping.
type ringHost struct {
	// name says which transport, in every error the rings make up.
	name string
	// timeout bounds every call, with the caller's own deadline.
	timeout time.Duration
	// done ends once the process is gone.
	done context.Context
	// shutdown is the error of a call made once the process is gone;
	// fence, when not nil, is the violation the rings fenced it for.
	shutdown func(method string, fence error) error
	log      hclog.Logger
	kill     func() error
	wake     chan struct{}
	mem      []byte
	m        *ringMap
	events   bool // the plugin forwards the transport's events
	// releaseTerminal: the plugin releases each handle it follows when it
	// reports it terminal, and says so with the state (ring.go).
	releaseTerminal bool
	// prompt: the transport is a Waker, so the plugin forwards its events
	// and notifications as soon as it has them; Events and Notifications
	// then answer from what the rings brought without a drain call.
	prompt bool
	half   int // a submission larger than this goes over gRPC

	subMu    sync.Mutex
	sub      *producer
	scratch  wire
	nextCall uint64

	mu       sync.Mutex
	unmapped bool
	comp     *consumer
	calls    []*ringCall // outstanding, in submission order
	known    map[sdk.HandleID]known
	evq      []sdk.Event
	notes    []sdk.Notification
	broken   error

	stopped    chan struct{}
	stopOnce   sync.Once
	readerDone chan struct{}
	stopAfter  func() bool
	// spinning counts callers draining the completion ring themselves;
	// while there are any, the reader naps (nap), and the last one to
	// stop rouses it.
	spinning atomic.Int32
	// polled is when Poll was last called (ringClock); while Polls come
	// that often, their caller drains the ring and the reader naps.
	polled atomic.Int64
	// napping is set while the reader naps; rousec ends a nap
	// (capacity 1).
	napping atomic.Bool
	rousec  chan struct{}
	// cpuAt is when a Poll last looked whether it runs on the CPU the
	// plugin's pump last ran on (ringClock), cpuSame what it found.
	cpuAt   atomic.Int64
	cpuSame atomic.Bool
}

// known is what the completion ring said of a handle posted through it,
// or released with its terminal state (release at terminal).
type known struct {
	terminal bool
	released bool // the plugin released it; the host's Release is answered here
	st       sdk.HandleStatus
}

// ringCall is one call waiting for its result.
type ringCall struct {
	id    uint64
	kind  uint16 // the result kind expected
	n     int    // items submitted
	ids   []sdk.HandleID
	got   int
	total int
	err   error
	posts []sdk.PostResult
	errs  []error
	done  chan struct{}
	fin   atomic.Bool
}

// ringHostConfig is what the host side of the rings needs of the process
// it talks to, and what AttachRings negotiated.
type ringHostConfig struct {
	name     string
	timeout  time.Duration
	done     context.Context
	shutdown func(method string, fence error) error
	log      hclog.Logger
	kill     func() error
	wake     chan struct{}
	// events, prompt and releaseTerminal are the plugin's answer to
	// AttachRings (ringHost).
	events, prompt, releaseTerminal bool
}

// newRingHost serves the host side of mem: it starts the reader, which
// stops once cfg.done ends (or Stop, Detach).
func newRingHost(mem []byte, l ringLayout, cfg ringHostConfig) *ringHost {
	m := newRingMap(mem, l)
	r := &ringHost{
		name: cfg.name, timeout: cfg.timeout, done: cfg.done, shutdown: cfg.shutdown,
		log: cfg.log, kill: cfg.kill, wake: cfg.wake, mem: mem, m: m,
		events: cfg.events, prompt: cfg.prompt, releaseTerminal: cfg.releaseTerminal,
		half:       int(l.subArena / 2),
		sub:        newProducer(m.sub, "submission"),
		comp:       newConsumer(m.comp, "completion"),
		known:      map[sdk.HandleID]known{},
		stopped:    make(chan struct{}),
		readerDone: make(chan struct{}),
		rousec:     make(chan struct{}, 1),
	}
	r.stopAfter = context.AfterFunc(cfg.done, r.halt)
	go r.reader()
	return r
}

// halt ends the rings: the reader exits and unmaps them.
func (r *ringHost) halt() {
	r.stopOnce.Do(func() {
		close(r.stopped)
		r.mu.Lock()
		if !r.unmapped {
			r.m.host.force()
		}
		r.mu.Unlock()
	})
}

// isStopped reports whether the rings were stopped.
func (r *ringHost) isStopped() bool {
	select {
	case <-r.stopped:
		return true
	default:
		return false
	}
}

// Stop stops the rings and waits for their reader, which unmaps them.
func (r *ringHost) Stop() {
	r.halt()
	<-r.readerDone
	r.stopAfter()
}

// reader drains the completion ring while nobody else does.
func (r *ringHost) reader() {
	defer close(r.readerDone)
	defer func() {
		r.subMu.Lock()
		r.mu.Lock()
		r.unmapped = true
		_ = unix.Munmap(r.mem)
		r.mu.Unlock()
		r.subMu.Unlock()
	}()
	napTimer := time.NewTimer(time.Hour)
	napTimer.Stop()
	last := time.Now()
	for !r.isStopped() {
		if r.drain() > 0 {
			last = time.Now()
			continue
		}
		if r.draining() {
			r.nap(napTimer)
			continue
		}
		if time.Since(last) < ringReaderSpin {
			yield(last, r.m.host, r.m.plugin)
			continue
		}
		v := r.m.host.prepare()
		if r.pending() || r.isStopped() {
			r.m.host.cancel()
			continue
		}
		r.m.host.wait(v, 0)
	}
}

// draining reports whether a caller drains the completion ring itself:
// one spins for its call's result, or Polls in a loop (its last Poll is at
// most ringPollGap old).
func (r *ringHost) draining() bool {
	if r.spinning.Load() > 0 {
		return true
	}
	at := r.polled.Load()
	return at != 0 && ringClock()-at < int64(ringPollGap)
}

// nap takes the reader off its CPU while a caller drains the completion
// ring: for about ringReaderSpin, or until the last caller spinning for its
// result stops (rouse). A reader that spun beside such a caller would take
// the CPU the plugin's pump needs (two cores, a host and a transport each
// spinning two threads), and one that slept on the doorbell would have the
// plugin wake it for every completion. The reader parks on a Go timer
// and channel, not on the doorbell: the plugin does not ring it, and a
// rouse readies it on the caller's own thread rather than waking another
// (which, on a CPU shared with the plugin, stalls both).
func (r *ringHost) nap(t *time.Timer) {
	r.napping.Store(true)
	if r.draining() && !r.isStopped() {
		t.Reset(ringReaderSpin)
		select {
		case <-t.C:
		case <-r.rousec:
		case <-r.stopped:
		}
		t.Stop()
	}
	r.napping.Store(false)
}

// rouse ends the reader's nap once no caller drains the completion ring:
// the caller may wait on Wake now, which the reader serves.
func (r *ringHost) rouse() {
	if !r.napping.Load() || r.draining() {
		return
	}
	select {
	case r.rousec <- struct{}{}:
	default:
	}
}

// pollYield is called by a Poll that found handles still running and
// nothing new. Its caller likely polls in a loop, beside a napping reader:
// when the plugin's pump last ran on this very CPU, the caller would keep
// the pump from running until the scheduler took the CPU away (a slice,
// hundreds of µs), so it gives the CPU away now, as a spinner does
// (yield). Whether the CPUs are the same is looked up at most every
// ringCPUCheck.
func (r *ringHost) pollYield() {
	now := ringClock()
	if now-r.cpuAt.Load() >= int64(ringCPUCheck) {
		r.cpuSame.Store(r.sameCPU())
		r.cpuAt.Store(now)
	}
	if r.cpuSame.Load() {
		_, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
}

// yield is one round of a caller's spin that began at since. Callers do
// not own the mapping, which the reader may unmap meanwhile: it is touched
// under r.mu only.
func (r *ringHost) yield(since time.Time) {
	pause(since, r.sameCPU())
}

// sameCPU reports whether the plugin's pump last ran on this CPU (sameCPU
// of the mapping, which it touches under r.mu only: false once unmapped).
func (r *ringHost) sameCPU() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.unmapped && sameCPU(r.m.host, r.m.plugin)
}

// pending reports whether the completion ring holds anything (or is
// broken: drain says so).
func (r *ringHost) pending() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unmapped || r.broken != nil {
		return false
	}
	n, err := r.comp.available()
	return err != nil || n > 0
}

// drain consumes what the completion ring holds and returns how many
// entries it took. A violation fences the transport.
func (r *ringHost) drain() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unmapped || r.broken != nil {
		return 0
	}
	n, err := r.comp.available()
	if err != nil {
		r.fence(err)
		return 0
	}
	woke := false
	for range n {
		e, payload, err := r.comp.next()
		if err == nil {
			err = e.check(false)
		}
		if err == nil {
			var w bool
			w, err = r.handle(e, payload)
			woke = woke || w
		}
		if err != nil {
			r.fence(err)
			return 0
		}
		r.comp.advance()
	}
	if n > 0 {
		// Room was freed: a plugin waiting for it may sleep.
		r.m.plugin.ring()
	}
	if woke {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	return int(n)
}

// handle applies one completion entry; it reports whether it may change
// what the host sees (a wake-up is due).
func (r *ringHost) handle(e ringEntry, payload []byte) (bool, error) {
	switch e.kind {
	case kindPostResult, kindReleaseRes, kindSendNotesRes, kindDrainResult:
		return false, r.result(e, payload)
	case kindEvents, kindStates:
		evs, rel, err := decodeEvents(payload, e.count, r.releaseTerminal)
		if err != nil {
			return false, fmt.Errorf("completion %d: %w", e.seq, err)
		}
		for i, ev := range evs {
			k, ok := r.known[ev.Handle]
			// Posted over gRPC, a released handle may be news here.
			released := rel != nil && rel[i]
			if (ok || released) && !k.terminal && ev.State.Terminal() {
				k = known{terminal: true, st: sdk.HandleStatus{State: ev.State, Reason: ev.Reason}}
			}
			if released {
				k.released, ok = true, true
			}
			if ok {
				r.known[ev.Handle] = k
			}
		}
		if e.kind == kindEvents && r.events {
			r.evq = append(r.evq, evs...)
		}
		return true, nil
	case kindNotes:
		ns, err := decodeNotes(payload, e.count)
		if err != nil {
			return false, fmt.Errorf("completion %d: %w", e.seq, err)
		}
		r.notes = append(r.notes, ns...)
		return true, nil
	case kindFatal:
		return false, fmt.Errorf("the plugin stopped serving the rings: %s", payload)
	}
	return false, ringErrorf("completion %d: kind %d is not handled", e.seq, e.kind)
}

// result applies one part of a call's result.
func (r *ringHost) result(e ringEntry, payload []byte) error {
	if len(r.calls) == 0 {
		return ringErrorf("completion %d answers call %d, but no call is outstanding", e.seq, e.call)
	}
	c := r.calls[0]
	if e.call != c.id || e.kind != c.kind {
		return ringErrorf("completion %d answers call %d (kind %d); the oldest outstanding call is %d (kind %d)", e.seq, e.call, e.kind, c.id, c.kind)
	}
	if e.code != 0 || e.kind == kindDrainResult {
		if e.count != 0 {
			return ringErrorf("completion %d: a drain result with %d items", e.seq, e.count)
		}
		c.err = callError(e, payload)
		r.finish(c)
		return nil
	}
	if int(e.first) != c.got || (c.got > 0 && int(e.total) != c.total) {
		return ringErrorf("completion %d (call %d): part [%d, +%d) of %d, after %d of %d", e.seq, e.call, e.first, e.count, e.total, c.got, c.total)
	}
	c.total = int(e.total)
	switch e.kind {
	case kindPostResult:
		res, err := decodePostResults(payload, e.count)
		if err != nil {
			return fmt.Errorf("completion %d (call %d): %w", e.seq, e.call, err)
		}
		for _, pr := range res {
			if pr.Err != nil {
				continue
			}
			if _, dup := r.known[pr.ID]; dup {
				// Its record would answer for the new transfer: a DONE
				// from the old one could hand back memory the new one
				// still writes.
				return ringErrorf("completion %d (call %d): Post returned handle %d, which the host has not released yet: ids must never be reused", e.seq, e.call, pr.ID)
			}
			r.known[pr.ID] = known{}
		}
		c.posts = append(c.posts, res...)
	case kindReleaseRes:
		errs, err := decodeErrs(payload, e.count)
		if err != nil {
			return fmt.Errorf("completion %d (call %d): %w", e.seq, e.call, err)
		}
		for i, err := range errs {
			if j := c.got + i; err == nil && j < len(c.ids) {
				delete(r.known, c.ids[j])
			}
		}
		c.errs = append(c.errs, errs...)
	case kindSendNotesRes:
		errs, err := decodeErrs(payload, e.count)
		if err != nil {
			return fmt.Errorf("completion %d (call %d): %w", e.seq, e.call, err)
		}
		c.errs = append(c.errs, errs...)
	}
	c.got += int(e.count)
	if c.got == c.total {
		if c.total != c.n {
			c.err = c.countError(r.name)
			c.posts, c.errs = nil, nil
		}
		r.finish(c)
	}
	return nil
}

// countError is the error of a call answered with another number of items
// than it submitted: its answer cannot be matched to them.
func (c *ringCall) countError(name string) error {
	method := "Post"
	switch c.kind {
	case kindReleaseRes:
		method = "Release"
	case kindSendNotesRes:
		method = "SendNotifications"
	}
	return sdk.Errorf(sdk.CodeBackend, "%s: %s answered %d items for %d; contract violation, results dropped", method, name, c.total, c.n)
}

// finish completes the oldest call.
func (r *ringHost) finish(c *ringCall) {
	r.calls = r.calls[1:]
	c.fin.Store(true)
	close(c.done)
}

// fence kills the transport after a protocol violation (r.mu held).
func (r *ringHost) fence(err error) {
	if r.broken != nil {
		return
	}
	r.broken = err
	r.log.Error("rings: the transport broke the ring protocol; fencing it (killing the process)", "transport", r.name, "error", err)
	go func() {
		if kerr := r.kill(); kerr != nil {
			r.log.Error("rings: fence failed", "transport", r.name, "error", kerr)
		}
	}()
	go r.halt()
}

// fenced returns the error a call sees once the rings fenced the
// transport: it waits (bounded) for the process to be gone.
func (r *ringHost) fenced(method string) error {
	r.mu.Lock()
	broken := r.broken
	r.mu.Unlock()
	if broken == nil {
		return nil
	}
	select {
	case <-r.done.Done():
	case <-time.After(fenceWait):
	}
	return r.shutdown(method, broken)
}

// gone is the error of any call once the rings fenced the transport or the
// process is gone; nil while it lives.
func (r *ringHost) gone(method string) error {
	if err := r.fenced(method); err != nil {
		return err
	}
	if r.done.Err() != nil {
		return r.shutdown(method, nil)
	}
	return nil
}

// submit sends one call through the submission ring and waits for its
// result, within the call's deadline.
func (r *ringHost) submit(ctx context.Context, method string, kind, resKind uint16, n int, ids []sdk.HandleID, payload []byte) (*ringCall, error) {
	if err := r.gone(method); err != nil {
		return nil, err
	}
	// The call's deadline: the caller's, within the call timeout. The
	// timer that enforces it is armed only if the call has to wait
	// (bounded): arming and stopping one costs more than most calls
	// take through the rings.
	// One reading of the clock serves the deadline, the spins and the
	// entry's time stamp: each costs some 50 ns here.
	now := time.Now()
	dl := now.Add(r.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	var cancel context.CancelFunc = func() {}
	defer func() { cancel() }()
	bounded := func() context.Context {
		ctx, cancel = context.WithDeadline(ctx, dl)
		return ctx
	}
	c := &ringCall{kind: resKind, n: n, ids: ids, done: make(chan struct{})}

	r.subMu.Lock()
	var (
		ent, arena []byte
		off        uint32
		err        error
	)
	spun := now
	for {
		if r.isStopped() {
			r.subMu.Unlock()
			return nil, r.lost(bounded(), method)
		}
		ent, arena, off, err = r.sub.reserve(len(payload))
		if !errors.Is(err, errRingFull) {
			break
		}
		// The plugin is behind: wait for room, within the deadline.
		if ctx.Err() != nil || !time.Now().Before(dl) {
			r.subMu.Unlock()
			return nil, r.timeoutError(method)
		}
		r.m.plugin.ring()
		if time.Since(spun) < ringWaitSpin {
			r.yield(spun)
		} else {
			time.Sleep(ringMinBackoff)
		}
	}
	if err != nil {
		r.subMu.Unlock()
		r.mu.Lock()
		r.fence(err)
		r.mu.Unlock()
		return nil, r.fenced(method)
	}
	r.nextCall++
	c.id = r.nextCall
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
	copy(arena, payload)
	e := ringEntry{seq: r.sub.tail, kind: kind, call: c.id, count: uint32(n), total: uint32(n), deadline: dl.UnixNano(), arenaOff: off, arenaLen: uint32(len(payload)), sent: now.UnixNano()}
	e.encode(ent)
	r.sub.publish()
	r.m.plugin.ring()
	r.subMu.Unlock()

	// Drain ourselves for a while: the answer usually comes within
	// microseconds, and a goroutine hand-off would cost more.
	r.spinning.Add(1)
	for spun := now; !c.fin.Load() && time.Since(spun) < ringWaitSpin; {
		if r.drain() == 0 {
			r.yield(spun)
		}
	}
	if r.spinning.Add(-1) == 0 {
		r.rouse()
	}
	if !c.fin.Load() {
		ctx = bounded()
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		select {
		case <-c.done:
		default:
			if r.done.Err() != nil {
				return nil, r.shutdown(method, nil)
			}
			return nil, r.timeoutError(method)
		}
	case <-r.stopped:
		select {
		case <-c.done:
		default:
			return nil, r.lost(ctx, method)
		}
	}
	if c.err != nil {
		return nil, r.callErr(method, c.err)
	}
	return c, nil
}

// lost is the error of a call whose rings stopped under it: the process
// exited or was fenced.
func (r *ringHost) lost(ctx context.Context, method string) error {
	if err := r.fenced(method); err != nil {
		return err
	}
	select {
	case <-r.done.Done():
		return r.shutdown(method, nil)
	case <-ctx.Done():
		return r.timeoutError(method)
	}
}

func (r *ringHost) timeoutError(method string) error {
	return sdk.Errorf(sdk.CodeTimeout, "%s: %s did not answer through its rings before the call's deadline (at most %s) or the caller canceled it; whether the call took effect is unknown: poll or count resources to find out",
		method, r.name, r.timeout)
}

// callErr is what a caller sees of a transport's call-level error, as over
// gRPC (callError): a live transport claiming PLUGIN_SHUTDOWN is a backend
// failure.
func (r *ringHost) callErr(method string, err error) error {
	if sdk.CodeOf(err) == sdk.CodePluginShutdown {
		if r.done.Err() != nil {
			return r.shutdown(method, nil)
		}
		return sdk.Errorf(sdk.CodeBackend, "%s: %s is alive but answered %v; treating it as a backend failure", method, r.name, err)
	}
	return err
}

// Detach tells the plugin to stop serving and stops the rings (Close).
func (r *ringHost) Detach() {
	r.subMu.Lock()
	if ent, _, _, err := r.sub.reserve(0); err == nil {
		e := ringEntry{seq: r.sub.tail, kind: kindDetach}
		e.encode(ent)
		r.sub.publish()
		r.m.plugin.ring()
	}
	r.subMu.Unlock()
	r.Stop()
}

// ReleasesAtTerminal reports whether the plugin releases each handle it
// reports terminal, and says so with the state (release at terminal).
func (r *ringHost) ReleasesAtTerminal() bool { return r.releaseTerminal }

// ForwardsEvents reports whether the plugin forwards the transport's
// events through the rings (the transport is an EventSource and claims it).
func (r *ringHost) ForwardsEvents() bool { return r.events }

// The calls below make one contract call through the rings. Each is given
// the same call over gRPC (overGRPC) for what the rings cannot carry: a
// batch too large for the submission ring, an id the rings do not know.

// Post submits posts through the rings and waits for their results. A
// batch too large for the submission ring goes over gRPC; the plugin
// follows its handles all the same, and Poll asks the transport for them.
func (r *ringHost) Post(ctx context.Context, posts []sdk.PostSpec, overGRPC func(context.Context, []sdk.PostSpec) ([]sdk.PostResult, error)) ([]sdk.PostResult, error) {
	size := 0
	for _, s := range posts {
		size += postSpecBytes(s)
	}
	if size > r.half || len(posts) > maxRingItems {
		return overGRPC(ctx, posts)
	}
	r.subMu.Lock()
	w := r.scratch[:0]
	for _, s := range posts {
		w = encodePostSpec(w, s)
	}
	payload := append([]byte(nil), w...)
	r.scratch = w[:0]
	r.subMu.Unlock()
	c, err := r.submit(ctx, "Post", kindPost, kindPostResult, len(posts), nil, payload)
	if err != nil {
		return nil, err
	}
	return c.posts, nil
}

// Release releases ids: a handle the plugin released at terminal is
// answered from its record, the others go through the rings (over gRPC
// when too many for a submission). The whole call fails, and changes
// nothing, when the part that crossed to the process fails.
func (r *ringHost) Release(ctx context.Context, ids []sdk.HandleID, overGRPC func(context.Context, []sdk.HandleID) ([]error, error)) ([]error, error) {
	local := r.releasedAtTerminal(ids, true)
	if local == nil {
		return r.release(ctx, ids, overGRPC)
	}
	out, err := answerLocal(ids, local, func(rest []sdk.HandleID) ([]error, error) { return r.release(ctx, rest, overGRPC) })
	if err != nil {
		return nil, err
	}
	r.forget(ids, local)
	return out, nil
}

// answerLocal answers OK for the ids marked local and calls call with the
// others, in order; a call that fails as a whole fails the whole.
func answerLocal(ids []sdk.HandleID, local []bool, call func([]sdk.HandleID) ([]error, error)) ([]error, error) {
	var rest []sdk.HandleID
	for i, id := range ids {
		if !local[i] {
			rest = append(rest, id)
		}
	}
	var errs []error
	if len(rest) > 0 {
		var err error
		if errs, err = call(rest); err != nil {
			return nil, err
		}
	}
	out := make([]error, len(ids))
	j := 0
	for i := range ids {
		if !local[i] {
			out[i] = errs[j]
			j++
		}
	}
	return out, nil
}

// releasedAtTerminal says which of ids the plugin released at terminal
// (with once, the first of repeats only: a repeated Release gets the
// transport's answer to a second release); nil when none (or no rings).
func (r *ringHost) releasedAtTerminal(ids []sdk.HandleID, once bool) []bool {
	if !r.releaseTerminal {
		return nil
	}
	var local []bool
	var seen map[sdk.HandleID]bool
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, id := range ids {
		if k, ok := r.known[id]; ok && k.released && !(once && seen[id]) {
			if local == nil {
				local, seen = make([]bool, len(ids)), map[sdk.HandleID]bool{}
			}
			local[i], seen[id] = true, true
		}
	}
	return local
}

// Cancel cancels ids over gRPC. Under release at terminal, a handle the
// plugin released at terminal is, to the caller, a terminal handle it
// holds: its Cancel changes nothing and is OK, answered here (the
// transport, which no longer knows it, would say NOT_FOUND). What the
// rings brought is taken first, so a handle released before Cancel was
// called is known as such. One the plugin released while the call was on
// its way is answered NOT_FOUND by the transport, and the plugin sends
// that answer only once the handle's state is in the completion ring
// (ringServing.canceledOverGRPC): taking what the rings brought once more
// turns it into OK.
func (r *ringHost) Cancel(ctx context.Context, ids []sdk.HandleID, overGRPC func(context.Context, []sdk.HandleID) ([]error, error)) ([]error, error) {
	if !r.releaseTerminal {
		return overGRPC(ctx, ids)
	}
	r.drain()
	local := r.releasedAtTerminal(ids, false)
	if local == nil {
		local = make([]bool, len(ids))
	}
	errs, err := answerLocal(ids, local, func(rest []sdk.HandleID) ([]error, error) { return overGRPC(ctx, rest) })
	if err != nil || !slices.ContainsFunc(errs, isNotFound) {
		return errs, err
	}
	r.drain()
	for i, released := range r.releasedAtTerminal(ids, false) {
		if released && isNotFound(errs[i]) {
			errs[i] = nil
		}
	}
	return errs, nil
}

// release releases ids through the rings when they fit, else over gRPC.
func (r *ringHost) release(ctx context.Context, ids []sdk.HandleID, overGRPC func(context.Context, []sdk.HandleID) ([]error, error)) ([]error, error) {
	if 8*len(ids) > r.half || len(ids) > maxRingItems {
		errs, err := overGRPC(ctx, ids)
		if err == nil {
			r.mu.Lock()
			for i, e := range errs {
				if e == nil {
					delete(r.known, ids[i])
				}
			}
			r.mu.Unlock()
		}
		return errs, err
	}
	payload := encodeIDs(make(wire, 0, 8*len(ids)), ids)
	c, err := r.submit(ctx, "Release", kindRelease, kindReleaseRes, len(ids), ids, payload)
	if err != nil {
		return nil, err
	}
	return c.errs, nil
}

// SendNotifications sends msgs through the rings; a batch too large for
// the submission ring goes over gRPC.
func (r *ringHost) SendNotifications(ctx context.Context, msgs []sdk.OutboundNotification, overGRPC func(context.Context, []sdk.OutboundNotification) ([]error, error)) ([]error, error) {
	if len(msgs) > maxRingItems {
		return overGRPC(ctx, msgs)
	}
	size := 0
	for _, m := range msgs {
		size += outNoteBytes(m)
	}
	if size > r.half {
		return overGRPC(ctx, msgs)
	}
	r.subMu.Lock()
	w := r.scratch[:0]
	for _, m := range msgs {
		w = encodeOutNote(w, m)
	}
	payload := append([]byte(nil), w...)
	r.scratch = w[:0]
	r.subMu.Unlock()
	c, err := r.submit(ctx, "SendNotifications", kindSendNotes, kindSendNotesRes, len(msgs), nil, payload)
	if err != nil {
		return nil, err
	}
	return c.errs, nil
}

// Poll answers from the completion ring for handles posted through it
// and not released: the last terminal state the plugin reported, else
// IN_PROGRESS (the plugin has not reported it terminal yet: the
// contract's answer for "cannot tell"). Any other id is asked of the
// transport over gRPC, so unknown and released ids get the transport's
// own answer.
func (r *ringHost) Poll(ctx context.Context, ids []sdk.HandleID, overGRPC func(context.Context, []sdk.HandleID) ([]sdk.HandleStatus, error)) ([]sdk.HandleStatus, error) {
	if err := r.gone("Poll"); err != nil {
		return nil, err
	}
	r.polled.Store(ringClock())
	drained := r.drain()
	if err := r.gone("Poll"); err != nil {
		return nil, err
	}
	out := make([]sdk.HandleStatus, len(ids))
	var miss []int
	running := false
	r.mu.Lock()
	for i, id := range ids {
		k, ok := r.known[id]
		switch {
		case !ok:
			miss = append(miss, i)
		case k.terminal:
			out[i] = k.st
		default:
			out[i].State = sdk.StateInProgress
			running = true
		}
	}
	r.mu.Unlock()
	if running && drained == 0 {
		r.pollYield()
	}
	if len(miss) == 0 {
		return out, nil
	}
	ask := make([]sdk.HandleID, len(miss))
	for j, i := range miss {
		ask[j] = ids[i]
	}
	sts, err := overGRPC(ctx, ask)
	if err != nil {
		return nil, err
	}
	for j, i := range miss {
		out[i] = sts[j]
	}
	return out, nil
}

// Events is what the plugin forwarded of the transport's events, in
// order (ForwardsEvents must hold). When nothing waits, one drain call
// through the rings asks the transport now and returns its answer, errors
// included; unless the transport is a Waker (prompt): the plugin then
// forwards what the transport has as soon as it wakes, and nothing is
// asked (a drain would cost a round trip through the rings on every round
// of the host, for nothing).
func (r *ringHost) Events(ctx context.Context, max int) ([]sdk.Event, error) {
	if err := r.gone("Events"); err != nil {
		return nil, err
	}
	r.drain()
	if err := r.gone("Events"); err != nil {
		return nil, err
	}
	r.mu.Lock()
	empty := len(r.evq) == 0
	r.mu.Unlock()
	if empty && !r.prompt {
		if _, err := r.submit(ctx, "Events", kindDrainEvents, kindDrainResult, 0, nil, nil); err != nil {
			return nil, err
		}
	}
	return takeLocked(r, &r.evq, max), nil
}

// Notifications is what the plugin forwarded of the transport's
// notifications, in order; when nothing waits, as Events.
func (r *ringHost) Notifications(ctx context.Context, max int) ([]sdk.Notification, error) {
	if err := r.gone("Notifications"); err != nil {
		return nil, err
	}
	r.drain()
	if err := r.gone("Notifications"); err != nil {
		return nil, err
	}
	r.mu.Lock()
	empty := len(r.notes) == 0
	r.mu.Unlock()
	if empty && !r.prompt {
		if _, err := r.submit(ctx, "Notifications", kindDrainNotes, kindDrainResult, 0, nil, nil); err != nil {
			return nil, err
		}
	}
	return takeLocked(r, &r.notes, max), nil
}
