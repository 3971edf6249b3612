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
	pb "github.com/custody-dev/custody/sdk/plugin/proto/custody/transport/v1"
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
	// fallbackWakeEvery paces Wake's channel when the rings are not in use
	// (off, refused, or the agent closed): the host then learns nothing by
	// itself and must poll.
	fallbackWakeEvery = 5 * time.Millisecond
)

// ringEpoch is the origin of ringClock.
var ringEpoch = time.Now()

// ringClock is a monotonic clock in nanoseconds, never 0.
func ringClock() int64 { return int64(time.Since(ringEpoch)) + 1 }

// ringState is what a Plugin holds of its rings.
type ringState struct {
	noRings         bool
	releaseTerminal bool // LaunchOptions.ReleaseTerminal
	log             hclog.Logger
	kill            func() error
	rings           atomic.Pointer[ringHost]
	wake            chan struct{}
	// ticker paces wake-ups while no rings are attached; started by the
	// first Wake, it ends with the process (tickerExit is closed then).
	tickerOnce sync.Once
	tickerMu   sync.Mutex
	tickerExit chan struct{}
}

// ringHost is the host side of one mapping.
type ringHost struct {
	c      *grpcClient
	log    hclog.Logger
	kill   func() error
	wake   chan struct{}
	mem    []byte
	m      *ringMap
	events bool // the plugin forwards the transport's events
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

func newRingHost(c *grpcClient, mem []byte, l ringLayout, log hclog.Logger, kill func() error, wake chan struct{}) *ringHost {
	m := newRingMap(mem, l)
	return &ringHost{
		c: c, log: log, kill: kill, wake: wake, mem: mem, m: m,
		half:       int(l.subArena / 2),
		sub:        newProducer(m.sub, "submission"),
		comp:       newConsumer(m.comp, "completion"),
		known:      map[sdk.HandleID]known{},
		stopped:    make(chan struct{}),
		readerDone: make(chan struct{}),
		rousec:     make(chan struct{}, 1),
	}
}

// attachRings offers the rings to the plugin after a successful Open. When
// the plugin does not take them, every call stays on gRPC.
func (p *Plugin) attachRings(ctx context.Context) {
	if p.noRings || p.rings.Load() != nil {
		return
	}
	mem, path, remove, err := createRingFile(defaultRingLayout)
	if err != nil {
		p.log.Warn("rings: cannot create the ring file; staying on gRPC", "error", err)
		return
	}
	var resp *pb.AttachRingsResponse
	err = p.call(ctx, "AttachRings", func(ctx context.Context) error {
		var err error
		resp, err = p.rpc.AttachRings(ctx, &pb.AttachRingsRequest{Path: path, Version: ringVersion, ReleaseTerminal: p.releaseTerminal})
		return err
	})
	// Both sides mapped it (or never will): the name goes.
	remove()
	if err != nil {
		_ = unix.Munmap(mem)
		if errors.Is(err, sdk.ErrUnsupported) {
			p.log.Debug("rings: the transport does not offer them; staying on gRPC", "transport", p.name)
		} else {
			p.log.Warn("rings: the transport refused them; staying on gRPC", "transport", p.name, "error", err)
		}
		return
	}
	r := newRingHost(p.grpcClient, mem, defaultRingLayout, p.log, p.kill, p.wake)
	r.events = resp.GetEvents()
	r.prompt = resp.GetPrompt()
	r.releaseTerminal = p.releaseTerminal && resp.GetReleaseTerminal()
	r.stopAfter = context.AfterFunc(p.done, func() { r.stop() })
	go r.reader()
	p.rings.Store(r)
}

// active is the attached rings, or nil.
func (p *Plugin) active() *ringHost {
	return p.rings.Load()
}

// stop ends the rings: the reader exits and unmaps them.
func (r *ringHost) stop() {
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

// closeRings stops the rings and waits for their reader (Kill, Stop).
func (p *Plugin) closeRings() {
	if r := p.rings.Load(); r != nil {
		r.stop()
		<-r.readerDone
		r.stopAfter()
	}
	p.tickerMu.Lock()
	exit := p.tickerExit
	p.tickerMu.Unlock()
	if exit != nil {
		<-exit
	}
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
			c.err = c.countError(r.c)
			c.posts, c.errs = nil, nil
		}
		r.finish(c)
	}
	return nil
}

func (c *ringCall) countError(g *grpcClient) error {
	method := "Post"
	switch c.kind {
	case kindReleaseRes:
		method = "Release"
	case kindSendNotesRes:
		method = "SendNotifications"
	}
	return g.count(method, c.total, c.n)
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
	r.log.Error("rings: the transport broke the ring protocol; fencing it (killing the process)", "transport", r.c.name, "error", err)
	go func() {
		if kerr := r.kill(); kerr != nil {
			r.log.Error("rings: fence failed", "transport", r.c.name, "error", kerr)
		}
	}()
	go r.stop()
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
	case <-r.c.done.Done():
	case <-time.After(killWait):
	}
	x := r.c.shutdown(method).(*ExitError)
	x.Fence = broken
	return x
}

// gone is the error of any call once the rings fenced the transport or the
// process is gone; nil while it lives.
func (r *ringHost) gone(method string) error {
	if err := r.fenced(method); err != nil {
		return err
	}
	if r.c.done.Err() != nil {
		return r.c.shutdown(method)
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
	dl := now.Add(r.c.timeout)
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
			if r.c.done.Err() != nil {
				return nil, r.c.shutdown(method)
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
	case <-r.c.done.Done():
		return r.c.shutdown(method)
	case <-ctx.Done():
		return r.timeoutError(method)
	}
}

func (r *ringHost) timeoutError(method string) error {
	return sdk.Errorf(sdk.CodeTimeout, "%s: %s did not answer through its rings before the call's deadline (at most %s) or the caller canceled it; whether the call took effect is unknown: poll or count resources to find out",
		method, r.c.name, r.c.timeout)
}

// callErr is what a caller sees of a transport's call-level error, as over
// gRPC (callError): a live transport claiming PLUGIN_SHUTDOWN is a backend
// failure.
func (r *ringHost) callErr(method string, err error) error {
	if sdk.CodeOf(err) == sdk.CodePluginShutdown {
		if r.c.done.Err() != nil {
			return r.c.shutdown(method)
		}
		return sdk.Errorf(sdk.CodeBackend, "%s: %s is alive but answered %v; treating it as a backend failure", method, r.c.name, err)
	}
	return err
}

// Open is Transport.Open; once it succeeds the rings are offered to the
// plugin (unless LaunchOptions.DisableRings).
func (p *Plugin) Open(ctx context.Context, req sdk.OpenRequest) error {
	if err := p.grpcClient.Open(ctx, req); err != nil {
		return err
	}
	p.attachRings(ctx)
	return nil
}

// Close is Transport.Close. Once the agent closed, the rings are detached
// and every later call goes over gRPC.
func (p *Plugin) Close(ctx context.Context) error {
	if err := p.grpcClient.Close(ctx); err != nil {
		return err
	}
	if r := p.rings.Swap(nil); r != nil {
		r.detach()
	}
	return nil
}

// detach tells the plugin to stop serving and stops the reader.
func (r *ringHost) detach() {
	r.subMu.Lock()
	if ent, _, _, err := r.sub.reserve(0); err == nil {
		e := ringEntry{seq: r.sub.tail, kind: kindDetach}
		e.encode(ent)
		r.sub.publish()
		r.m.plugin.ring()
	}
	r.subMu.Unlock()
	r.stop()
	<-r.readerDone
	r.stopAfter()
}

// Rings reports whether Post, Release and completions go through the
// shared-memory rings now (false: over gRPC).
func (p *Plugin) Rings() bool { return p.rings.Load() != nil }

// ReleasesAtTerminal reports whether the rings are attached and run release
// at terminal (LaunchOptions.ReleaseTerminal, taken by the plugin).
func (p *Plugin) ReleasesAtTerminal() bool {
	r := p.rings.Load()
	return r != nil && r.releaseTerminal
}

// Post is Transport.Post: through the rings when attached.
func (p *Plugin) Post(ctx context.Context, posts []sdk.PostSpec) ([]sdk.PostResult, error) {
	r := p.active()
	if r == nil {
		return p.grpcClient.Post(ctx, posts)
	}
	size := 0
	for _, s := range posts {
		size += postSpecBytes(s)
	}
	if size > r.half || len(posts) > maxRingItems {
		// Too large for the ring: gRPC; the plugin follows the handles
		// all the same, and Poll asks the transport for them.
		return p.grpcClient.Post(ctx, posts)
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

// Release is Transport.Release: through the rings when attached; a handle
// the plugin released at terminal is answered from its record.
func (p *Plugin) Release(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	r := p.active()
	local := r.releasedAtTerminal(ids, true)
	if local == nil {
		return p.release(ctx, r, ids)
	}
	out, err := answerLocal(ids, local, func(rest []sdk.HandleID) ([]error, error) { return p.release(ctx, r, rest) })
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
	if r == nil || !r.releaseTerminal {
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

// Cancel is Transport.Cancel, over gRPC. A handle the plugin released at
// terminal is, to the caller, a terminal handle it holds: its Cancel
// changes nothing and is OK, answered here (the transport, which no longer
// knows it, would say NOT_FOUND). What the rings brought is taken first,
// so a handle released before Cancel was called is known as such. One the
// plugin released while the call was on its way is answered NOT_FOUND by
// the transport, and the plugin sends that answer only once the handle's
// state is in the completion ring (grpcServer.Cancel): taking what the
// rings brought once more turns it into OK.
func (p *Plugin) Cancel(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	r := p.active()
	if r == nil || !r.releaseTerminal {
		return p.grpcClient.Cancel(ctx, ids)
	}
	r.drain()
	local := r.releasedAtTerminal(ids, false)
	if local == nil {
		local = make([]bool, len(ids))
	}
	errs, err := answerLocal(ids, local, func(rest []sdk.HandleID) ([]error, error) { return p.grpcClient.Cancel(ctx, rest) })
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

// release releases ids through the rings when r is attached and they fit,
// else over gRPC.
func (p *Plugin) release(ctx context.Context, r *ringHost, ids []sdk.HandleID) ([]error, error) {
	if r == nil || 8*len(ids) > r.half || len(ids) > maxRingItems {
		errs, err := p.grpcClient.Release(ctx, ids)
		if r != nil && err == nil {
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

// SendNotifications is Transport.SendNotifications: through the rings when
// attached (a batch too large for the ring goes over gRPC).
func (p *Plugin) SendNotifications(ctx context.Context, msgs []sdk.OutboundNotification) ([]error, error) {
	r := p.active()
	if r == nil || len(msgs) > maxRingItems {
		return p.grpcClient.SendNotifications(ctx, msgs)
	}
	size := 0
	for _, m := range msgs {
		size += outNoteBytes(m)
	}
	if size > r.half {
		return p.grpcClient.SendNotifications(ctx, msgs)
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

// Poll is Transport.Poll: from the completion ring for handles posted
// through it, over gRPC for any other id.
func (p *Plugin) Poll(ctx context.Context, ids []sdk.HandleID) ([]sdk.HandleStatus, error) {
	r := p.active()
	if r == nil {
		return p.grpcClient.Poll(ctx, ids)
	}
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
	sts, err := p.grpcClient.Poll(ctx, ask)
	if err != nil {
		return nil, err
	}
	for j, i := range miss {
		out[i] = sts[j]
	}
	return out, nil
}

// events is Events once HasEvents holds.
func (p *Plugin) events(ctx context.Context, max int) ([]sdk.Event, error) {
	r := p.active()
	if r == nil || !r.events {
		return p.grpcClient.Events(ctx, max)
	}
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

// Notifications is Transport.Notifications: what the plugin forwarded
// through the rings, when attached.
func (p *Plugin) Notifications(ctx context.Context, max int) ([]sdk.Notification, error) {
	r := p.active()
	if r == nil {
		return p.grpcClient.Notifications(ctx, max)
	}
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

// Wake is sdk.Waker. With rings, it receives a value whenever the
// completion ring brought a state change, an event or a notification; the
// plugin drains the transport's notifications at once when the transport
// is itself a Waker, else every 50 µs while busy and at least every
// ringIdleNotePoll (100 ms) when idle. Without
// rings (off or refused) it receives one every fallbackWakeEvery, since
// the host can learn nothing by itself then; before Open, and after Close,
// there is nothing to wake for.
func (p *Plugin) Wake() <-chan struct{} {
	p.tickerOnce.Do(func() {
		exit := make(chan struct{})
		p.tickerMu.Lock()
		p.tickerExit = exit
		p.tickerMu.Unlock()
		go p.fallbackTicker(exit)
	})
	return p.wake
}

// fallbackTicker wakes the host until the rings are attached, or for the
// process's life when they never are.
func (p *Plugin) fallbackTicker(exit chan struct{}) {
	defer close(exit)
	t := time.NewTicker(fallbackWakeEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if p.rings.Load() != nil {
				// The rings wake the host from now on; once they are
				// detached (Close), the agent has nothing left to say.
				return
			}
			select {
			case p.wake <- struct{}{}:
			default:
			}
		case <-p.done.Done():
			return
		}
	}
}
