package ucx

import (
	"os"

	"github.com/custody-dev/custody/sdk"
)

var _ sdk.Waker = (*Transport)(nil)

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
func (t *Transport) Wake() <-chan struct{} { return t.woken }

// signal sends a wake-up to Wake's channel without blocking; one already
// waiting covers this change too.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// wakeWatch forwards the shim's wake-ups to a channel.
type wakeWatch struct {
	f       *os.File
	stopped chan struct{} // closed by stop
	done    chan struct{} // closed when the goroutine ended
}

// startWakeWatch starts the goroutine that turns the shim's eventfd
// writes into sends on ch.
func startWakeWatch(nw *nativeWorker, ch chan struct{}) (*wakeWatch, error) {
	f, err := nw.wakeFile()
	if err != nil {
		return nil, err
	}
	w := &wakeWatch{f: f, stopped: make(chan struct{}), done: make(chan struct{})}
	go w.run(nw, ch)
	return w, nil
}

func (w *wakeWatch) run(nw *nativeWorker, ch chan struct{}) {
	defer close(w.done)
	var buf [8]byte
	var seen uint64
	for {
		// Arm, then look: a change the look missed writes the eventfd.
		if s := nw.wakeArm(); s != seen {
			seen = s
			// Wait for the slot rather than drop the send: while it is
			// full, the value in it covers every change, so nothing is
			// armed and the shim writes nothing (a consumer that does not
			// listen costs no syscall per completion). Once the consumer
			// took it, this send refills it at once, covering what changed
			// meanwhile.
			select {
			case ch <- struct{}{}:
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
// open until it returns (the goroutine reads its counter).
func (w *wakeWatch) stop() {
	close(w.stopped)
	_ = w.f.Close()
	<-w.done
}
