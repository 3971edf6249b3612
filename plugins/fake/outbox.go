package fake

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// The outbox holds the notifications the DMA engine delivers: each post's
// notification once its transfer is DONE, and notif-delay'd ones once due.
// A post's notification must arrive exactly once after DONE, so one that
// finds the peer's queue full is kept and tried again every sendRetry
// until it is delivered or the peer's socket is gone (the peer closed or
// died: no one is left to deliver it to). Delivery never blocks the engine:
// it sends through a non-blocking socket of its own (outSocket), so a full
// queue costs one failed sendto, not a wait. The outbox is FIFO per peer:
// once a note to a peer is held back, every later one to that peer waits
// behind it, and SendNotifications queues a message behind them too, so
// that one sender's notifications stay in order. Notes still in the outbox
// when the agent closes or dies are lost, as in a process that exits.

// openOutSocket opens the engine's sending socket: an unbound, non-blocking
// unix datagram socket. A receiver learns the sender from the datagram's
// payload, never from its address, so it needs no name.
func openOutSocket() (int, error) {
	return syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
}

// queuedFor reports whether a notification to the socket to is waiting in
// the outbox, so that a later one must go behind it. The caller holds t.mu.
func (t *Transport) queuedFor(to *net.UnixAddr) bool {
	for _, n := range t.outbox {
		if n.to.Name == to.Name {
			return true
		}
	}
	return false
}

// flush tries, without waiting, to deliver each note of the outbox, in
// order, skipping peers whose queue was full earlier in this pass. It
// drops notes to a peer whose socket is gone and keeps the rest; it
// returns sendRetry while notes remain (when to try again), zero when the
// outbox is empty.
func (t *Transport) flush() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.outbox) == 0 {
		return 0
	}
	full := map[string]bool{}
	kept := t.outbox[:0]
	for _, n := range t.outbox {
		if full[n.to.Name] {
			kept = append(kept, n)
			continue
		}
		err := t.trySend(n)
		if err == nil || peerSocketGone(err) {
			continue
		}
		full[n.to.Name] = true
		kept = append(kept, n)
		if t.sendRetryHook != nil {
			t.sendRetryHook()
		}
	}
	clear(t.outbox[len(kept):])
	t.outbox = kept
	if len(kept) == 0 {
		return 0
	}
	return sendRetry
}

// trySend makes one non-blocking try to queue n in its peer's socket.
func (t *Transport) trySend(n note) error {
	if t.sendFault != nil {
		if err := t.sendFault(n.msg); err != nil {
			return err
		}
	}
	b := t.encode(n.msg)
	for {
		err := syscall.Sendto(t.out, b, 0, &syscall.SockaddrUnix{Name: n.to.Name})
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// peerSocketGone reports whether a send failed because no socket is bound
// to the peer's name any more: the peer agent closed or died.
func peerSocketGone(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)
}
