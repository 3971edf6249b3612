package ring

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/sdk"
)

// Draining the completion ring. Whoever waits drains it itself: a caller
// spinning for its call's result (submit: when the call found the pump
// awake, or its caller polls in a loop), a Poll. The reader goroutine
// drains it when nobody does, spinning a little after the last completion
// and then sleeping on the host's doorbell. While a caller drains (spins
// for its result, or Polls in a loop), the reader naps off its CPU (nap),
// and a Poll that finds nothing new gives up the CPU when it shares it
// with the plugin's pump (pollYield).

// reader drains the completion ring while nobody else does.
func (r *Client) reader() {
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
	var sp spinner
	for !r.isStopped() {
		if r.drain() > 0 {
			last = time.Now()
			continue
		}
		if r.draining() {
			r.nap(napTimer)
			continue
		}
		if time.Since(last) < readerSpin {
			sp.yield(last, r.m.host, r.m.plugin)
			continue
		}
		v := r.m.host.prepare(asleep)
		if r.pending() || r.isStopped() {
			r.m.host.cancel()
			continue
		}
		r.m.host.wait(v, 0)
	}
}

// draining reports whether a caller drains the completion ring itself:
// one spins for its call's result, or Polls in a loop (its last Poll is at
// most pollGap old).
func (r *Client) draining() bool {
	return r.spinning.Load() > 0 || r.pollLooping()
}

// pollLooping reports whether a caller Polls in a loop: its last Poll is
// at most pollGap old.
func (r *Client) pollLooping() bool {
	at := r.polled.Load()
	return at != 0 && clock()-at < int64(pollGap)
}

// nap takes the reader off its CPU while a caller drains the completion
// ring: for about readerSpin, or until the last caller spinning for its
// result stops (rouse). A reader that spun beside such a caller would take
// the CPU the plugin's pump needs (on a machine with few cores, the host
// and the transport would each spin two threads), and one that slept on
// the doorbell would have the plugin wake it for every completion. The reader parks on a Go timer
// and channel, not on the doorbell: the plugin does not ring it, and a
// rouse readies it on the caller's own thread rather than waking another
// (which, on a CPU shared with the plugin, stalls both).
func (r *Client) nap(t *time.Timer) {
	r.napping.Store(true)
	if r.draining() && !r.isStopped() {
		t.Reset(readerSpin)
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
func (r *Client) rouse() {
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
// cpuCheck.
func (r *Client) pollYield() {
	now := clock()
	if now-r.cpuAt.Load() >= int64(cpuCheck) {
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
func (r *Client) yield(sp *spinner, since time.Time) {
	pause(since, sp.sameCPU(time.Now(), r.sameCPU))
}

// sameCPU reports whether the plugin's pump last ran on this CPU (sameCPU
// of the mapping, which it touches under r.mu only: false once unmapped).
func (r *Client) sameCPU() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.unmapped && sameCPU(r.m.host, r.m.plugin)
}

// pending reports whether the completion ring holds anything (or is
// broken: drain says so).
func (r *Client) pending() bool {
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
func (r *Client) drain() int {
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
		r.m.plugin.roomFreed()
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
func (r *Client) handle(e entry, payload []byte) (bool, error) {
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
	return false, violationf("completion %d: kind %d is not handled", e.seq, e.kind)
}

// result applies one part of a call's result.
func (r *Client) result(e entry, payload []byte) error {
	if len(r.calls) == 0 {
		return violationf("completion %d answers call %d, but no call is outstanding", e.seq, e.call)
	}
	c := r.calls[0]
	if e.call != c.id || e.kind != c.kind {
		return violationf("completion %d answers call %d (kind %d); the oldest outstanding call is %d (kind %d)", e.seq, e.call, e.kind, c.id, c.kind)
	}
	if e.code != 0 || e.kind == kindDrainResult {
		if e.count != 0 {
			return violationf("completion %d: a drain result with %d items", e.seq, e.count)
		}
		c.err = callError(e, payload)
		r.finish(c)
		return nil
	}
	if int(e.first) != c.got || (c.got > 0 && int(e.total) != c.total) {
		return violationf("completion %d (call %d): part [%d, +%d) of %d, after %d of %d", e.seq, e.call, e.first, e.count, e.total, c.got, c.total)
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
				return violationf("completion %d (call %d): Post returned handle %d, which the host has not released yet: ids must never be reused", e.seq, e.call, pr.ID)
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

// finish completes the oldest call.
func (r *Client) finish(c *pendingCall) {
	r.calls = r.calls[1:]
	c.fin.Store(true)
	close(c.done)
}
