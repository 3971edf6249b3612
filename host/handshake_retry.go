package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	"github.com/custody-dev/custody/core"
)

// A failing handshake is retried by the host, never by the engine's calls.
// An attempt is one fetch of every rank's metadata (peers.go, fetchPeer)
// and, when that succeeded, core's native half (ConnectPeer: LoadPeers,
// PrepareDescriptors). When an attempt fails, the next one starts after a
// backoff that doubles from minHandshakeBackoff to maxHandshakeBackoff; it
// is reset when an attempt succeeds, and by ConnectPeer (which starts an
// attempt at once) and RemovePeer of the name. Until an attempt succeeds,
// calls that need the peer report the last attempt's failure and start
// nothing: ExpectReceive fails with it (handshakeError: FailedPrecondition
// on the engine API, or Unavailable when its cause is transient on this
// host, engineCode), and a Read or Write is recorded and failed at once
// with it (reported, with its blocks invalid). Before any attempt failed,
// ExpectReceive answers ErrConnecting (Unavailable: in progress) and
// requests wait for the attempt. The host logs a failure when it differs
// from the last one logged (the first, a different error) and the
// recovery, not each attempt.
const (
	minHandshakeBackoff = 10 * time.Millisecond
	maxHandshakeBackoff = 2 * time.Second
)

// ErrHandshakeFailed matches the error of calls that need a peer whose last
// handshake attempt failed; the error names the peer and the attempt's
// cause. The host retries on its own; the call succeeds once an attempt did.
var ErrHandshakeFailed = errors.New("peer handshake failed")

// Engine API error details of a failed handshake (google.rpc.ErrorInfo).
const (
	errorDomain           = "custody.engine.v1"
	reasonHandshakeFailed = "HANDSHAKE_FAILED"
)

// handshakeError is a failed attempt of a peer's handshake.
type handshakeError struct {
	peer string
	err  error
}

func (e *handshakeError) Error() string {
	return fmt.Sprintf("peer %q: handshake failed: %v", e.peer, e.err)
}

func (e *handshakeError) Unwrap() error { return e.err }

func (e *handshakeError) Is(target error) bool { return target == ErrHandshakeFailed }

// withHandshakeInfo adds to st, when err is a failed handshake, the
// ErrorInfo that tells it from the engine API's other errors of st's code.
func withHandshakeInfo(st *status.Status, err error) *status.Status {
	var he *handshakeError
	if !errors.As(err, &he) {
		return st
	}
	d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: reasonHandshakeFailed, Domain: errorDomain, Metadata: map[string]string{"peer": he.peer}})
	if derr != nil {
		return st
	}
	return d
}

// handshakeRetry is the owner goroutine's bookkeeping of attempts.
type handshakeRetry struct {
	gen    uint64 // numbers attempts: a result of another than its link's is stale
	native int    // links whose attempt is in core's native half
	// Test hooks, set on the owner goroutine (do): after stands in for the
	// backoff's timer, settled hears every attempt's outcome (nil: the
	// peer is connected).
	after   func(time.Duration) (<-chan time.Time, func() bool)
	settled func(peer string, err error)
}

func (r *handshakeRetry) timer(d time.Duration) (<-chan time.Time, func() bool) {
	if r.after != nil {
		return r.after(d)
	}
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// nextBackoff is the wait after a failure that followed a wait of d.
func nextBackoff(d time.Duration) time.Duration {
	return min(max(2*d, minHandshakeBackoff), maxHandshakeBackoff)
}

// attempt starts an attempt of l's handshake in the background, after wait.
func (h *Host) attempt(name string, l *link, wait time.Duration) {
	h.retry.gen++
	gen := h.retry.gen
	ctx, cancel := context.WithCancel(h.bgCtx)
	l.gen, l.stop, l.pending = gen, cancel, true
	ranks := append([]RemoteRank(nil), l.ranks...)
	var fire <-chan time.Time
	stop := func() bool { return false }
	if wait > 0 {
		fire, stop = h.retry.timer(wait)
	}
	h.bg.Add(1)
	go func() {
		defer h.bg.Done()
		defer cancel()
		if fire != nil {
			select {
			case <-fire:
			case <-ctx.Done():
				stop()
				return
			}
		}
		hs := handshake{name: name, gen: gen}
		if info, ok := h.Info(); !ok {
			hs.err = fmt.Errorf("peer %q: %w", name, ErrRestarting)
		} else {
			fctx, fcancel := context.WithTimeout(ctx, handshakeTimeout)
			hs.spec, hs.err = h.fetchPeer(fctx, name, ranks, info.Compat)
			fcancel()
		}
		select {
		case h.handshakes <- hs:
		case <-ctx.Done():
		}
	}()
}

// resetLink ends l's scheduled or running fetch, and forgets its failures
// and backoff (not what was logged: a repeated failure is not logged again).
func (h *Host) resetLink(l *link) {
	if l.stop != nil {
		l.stop()
	}
	h.retry.gen++
	l.gen, l.stop, l.pending = h.retry.gen, nil, false
	l.fail, l.delay, l.failures = nil, 0, 0
}

// dropLink forgets the link of name (RemovePeer), ending its attempt.
func (h *Host) dropLink(name string) {
	l := h.links[name]
	if l == nil {
		return
	}
	h.resetLink(l)
	h.setNative(l, false)
	delete(h.links, name)
}

func (h *Host) setNative(l *link, on bool) {
	if l.native == on {
		return
	}
	l.native = on
	if on {
		h.retry.native++
	} else {
		h.retry.native--
	}
}

// attemptFailed records a failed attempt, logs it if it differs from the
// failure logged last, and schedules the next attempt.
func (h *Host) attemptFailed(name string, l *link, err error) {
	l.fail = &handshakeError{peer: name, err: err}
	l.delay = nextBackoff(l.delay)
	l.failures++
	h.metrics.Failures.WithLabelValues("handshake_failed").Inc()
	if key := failureKey(err); key != l.logged {
		l.logged = key
		h.log.Warn("peer handshake failed; retrying with backoff, calls that need the peer fail with this error until an attempt succeeds",
			"failure_type", "handshake_failed", "peer", name, "error", err.Error(), "failed_attempts", l.failures, "retry_in", l.delay.String())
	}
	h.attempt(name, l, l.delay)
	if h.retry.settled != nil {
		h.retry.settled(name, l.fail)
	}
}

// failureKey is what tells two failures apart for the log: the message,
// less the local address of a connection (a new port each attempt).
func failureKey(err error) string {
	msg := err.Error()
	var op *net.OpError
	if errors.As(err, &op) && op.Source != nil {
		bare := *op
		bare.Source = nil
		msg = strings.Replace(msg, op.Error(), bare.Error(), 1)
	}
	return msg
}

// attemptSucceeded ends l's failures: the peer is connected.
func (h *Host) attemptSucceeded(name string, l *link) {
	if l.logged != "" {
		h.log.Info("peer handshake succeeded after failing", "peer", name, "failed_attempts", l.failures)
	}
	l.fail, l.delay, l.failures, l.logged = nil, 0, 0, ""
	if h.retry.settled != nil {
		h.retry.settled(name, nil)
	}
}

// watchHandshakes notes the links whose native half ended with the peer
// connected; a failure comes as core's handshake_failed alert
// (handshakeAlert), in the same Ready. It runs after each Ready.
func (h *Host) watchHandshakes() {
	if h.retry.native == 0 {
		return
	}
	for name, l := range h.links {
		if l.native && !h.core.Handshaking(name) {
			// Ended without a failure alert: published (and maybe
			// dropped as stale since; the next request connects it).
			h.setNative(l, false)
			h.attemptSucceeded(name, l)
		}
	}
}

// handshakeAlert takes core's handshake_failed alert of a linked peer: the
// end of the native half of its attempt, or the echo of a failure already
// recorded (the requests failed with it through the Inbox). It reports
// whether it took the alert: then nothing else logs or counts it.
func (h *Host) handshakeAlert(a core.Alert) bool {
	l := h.links[a.Peer]
	if l == nil {
		return false
	}
	var he *handshakeError
	if errors.As(a.Err, &he) {
		return true
	}
	if !l.native {
		return false
	}
	h.setNative(l, false)
	if errors.Is(a.Err, core.ErrPeerRemoved) {
		// The handshake of a link removed before this one was made: not
		// this link's attempt, which starts now.
		_ = h.ensurePeer(a.Peer)
		return true
	}
	h.attemptFailed(a.Peer, l, a.Err)
	return true
}

// failFast fails a request just recorded for peer, waiting in core, when
// the peer's last attempt failed: with that failure, at once, instead of
// starting another attempt.
func (h *Host) failFast(peer string) {
	if l := h.links[peer]; l != nil && l.fail != nil && !h.core.Connected(peer) {
		h.core.Inbox().HandshakeFailed(peer, l.fail)
	}
}

// handshakeFailure is the failure calls that need peer report, or nil.
func (h *Host) handshakeFailure(peer string) error {
	if l := h.links[peer]; l != nil && l.fail != nil {
		return l.fail
	}
	return nil
}
