package ucx

import (
	"os"
	"sync/atomic"

	"github.com/custody-dev/custody/sdk"
)

var (
	_ sdk.Waker        = (*Transport)(nil)
	_ sdk.WakeReasoner = (*Transport)(nil)
)

// Wake implements sdk.Waker: the channel receives a value (sent without
// blocking, capacity 1, so wake-ups coalesce) whenever the shim queued a
// completion (a handle may have turned terminal and its event be ready,
// or a notification send finished), received a notification or lost one
// (out of memory), or an endpoint failed; and when the agent ends (Close,
// or a watched peer's death, before the process exits). A wake-up may be
// spurious; a change is never left without one. The channel is made by
// New, so it may be taken before Open; it is the same for the transport's
// life and is never closed.
//
// The progress thread (or a caller's thread, when a transfer completes
// inside Post) tells Go through an eventfd: every change bumps a counter
// in the shim, and only when a Go waiter armed itself does the shim write
// the eventfd, once per arming. One goroutine per agent blocks on it in
// Go's poller, so an idle agent costs nothing, and turns each write into a
// send; it ends at Close.
func (t *Transport) Wake() <-chan struct{} { return t.wake.ch }

// WakeReasons implements sdk.WakeReasoner: states when a completion was
// queued or an endpoint failed since the previous call, notifications
// when a notification was received or lost; both when the agent ended.
// The goroutine that forwards the shim's wake-ups tells them apart by the
// shim's own counters (completions and endpoint failures, notifications
// received and lost), and records the reason before it sends, so a reason
// taken here is never older than the wake-up that announced it.
func (t *Transport) WakeReasons() (states, notifications bool) {
	return t.wake.states.Swap(false), t.wake.notes.Swap(false)
}

// waker is Wake's channel and the reasons of what it sent.
type waker struct {
	ch     chan struct{}
	states atomic.Bool
	notes  atomic.Bool
}

func newWaker() *waker { return &waker{ch: make(chan struct{}, 1)} }

// signal sends a wake-up for both reasons without blocking; one already
// waiting covers this change too.
func (w *waker) signal() {
	w.states.Store(true)
	w.notes.Store(true)
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// wakeWatch forwards the shim's wake-ups to a waker.
type wakeWatch struct {
	f       *os.File
	stopped chan struct{} // closed by stop
	done    chan struct{} // closed when the goroutine ended
}

// startWakeWatch starts the goroutine that turns the shim's eventfd
// writes into sends on wk's channel.
func startWakeWatch(nw *nativeWorker, wk *waker) (*wakeWatch, error) {
	f, err := nw.wakeFile()
	if err != nil {
		return nil, err
	}
	w := &wakeWatch{f: f, stopped: make(chan struct{}), done: make(chan struct{})}
	go w.run(nw, wk)
	return w, nil
}

func (w *wakeWatch) run(nw *nativeWorker, wk *waker) {
	defer close(w.done)
	var buf [8]byte
	var seen, states, notes uint64
	for {
		// Arm, then look: a change the look missed writes the eventfd.
		if s := nw.wakeArm(); s != seen {
			seen = s
			// The shim bumps a change's own counter before the one
			// armed here, so both are visible now.
			if v := nw.doneSeq() + nw.peerFailures(); v != states {
				states = v
				wk.states.Store(true)
			}
			if v := nw.msgSeq() + nw.msgLost(); v != notes {
				notes = v
				wk.notes.Store(true)
			}
			// Wait for the slot rather than drop the send: while it is
			// full, the value in it covers every change, so nothing is
			// armed and the shim writes nothing (a consumer that does not
			// listen costs no syscall per completion). Once the consumer
			// took it, this send refills it at once, covering what changed
			// meanwhile.
			select {
			case wk.ch <- struct{}{}:
			case <-w.stopped:
				return
			}
			continue
		}
		if _, err := w.f.Read(buf[:]); err != nil {
			return // closed by stop
		}
	}
}

// stop ends the goroutine and waits for it; the shim's worker must stay
// open until it returns (the goroutine reads its counters).
func (w *wakeWatch) stop() {
	close(w.stopped)
	_ = w.f.Close()
	<-w.done
}
