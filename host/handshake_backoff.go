package host

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	"github.com/custody-dev/custody/core"
)

// A failed handshake attempt is remembered by its link until an attempt
// succeeds, ConnectPeer starts one at once, or RemovePeer drops the link.
// Meanwhile the engine hears the attempt's own error, naming the peer and
// what failed (ErrHandshakeFailed: FailedPrecondition on the engine API,
// ErrorInfo reason HANDSHAKE_FAILED), instead of "in progress": a call that
// needs the peer starts a new attempt only once a backoff passed, doubling
// from minHandshakeBackoff to maxHandshakeBackoff; before that it is
// refused with the error and takes nothing (an ExpectReceive, a Read or a
// Write). After it, the call starts an attempt: an ExpectReceive is still
// refused with the last failure, a Read or Write waits for the attempt in
// core, and fails with its error if it fails too. So a connector tells a
// peer that is coming up (Unavailable while the first attempt runs) from
// one that is misconfigured, and a peer that never answers costs one
// attempt per backoff, not one per call. The host logs a failure when it
// differs from the one it logged last, and the recovery; each failed
// attempt is counted (custody_failures_total{type="handshake_failed"}).
const (
	minHandshakeBackoff = 10 * time.Millisecond
	maxHandshakeBackoff = 2 * time.Second
)

// ErrHandshakeFailed matches the error of calls that need a peer whose last
// handshake attempt failed; the error names the peer and the attempt's
// cause.
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

// attempts is a link's record of its failed handshake attempts.
type attempts struct {
	last     *handshakeError // the last failed attempt; nil once one succeeded
	failures int             // failed attempts since the last success
	delay    time.Duration
	retryAt  time.Time
	logged   string // failureKey of the failure logged last
}

// failed records a failed attempt at now; it reports whether the failure
// differs from the one logged last (and is to be logged).
func (a *attempts) failed(peer string, err error, now time.Time) bool {
	a.last = &handshakeError{peer: peer, err: err}
	a.failures++
	a.delay = min(max(2*a.delay, minHandshakeBackoff), maxHandshakeBackoff)
	a.retryAt = now.Add(a.delay)
	key := failureKey(err)
	if key == a.logged {
		return false
	}
	a.logged = key
	return true
}

// refusal is the error a call that needs the peer is refused with at now
// (the last failure, within its backoff), or nil: the call may start an
// attempt.
func (a *attempts) refusal(now time.Time) error {
	if a.last != nil && now.Before(a.retryAt) {
		return a.last
	}
	return nil
}

// succeeded ends the failures; it reports how many there were.
func (a *attempts) succeeded() int {
	n := a.failures
	a.last, a.failures, a.delay, a.retryAt, a.logged = nil, 0, 0, time.Time{}, ""
	return n
}

// countsAgainst reports whether a failed attempt's cause is the peer's (or
// its configuration's), not this host's passing state: a fence, a
// transport restart, the peer removed meanwhile.
func countsAgainst(err error) bool {
	return !errors.Is(err, ErrRestarting) && !errors.Is(err, core.ErrNotAttached) &&
		!errors.Is(err, core.ErrFenced) && !errors.Is(err, core.ErrPeerRemoved)
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

// handshakeFailed takes core's handshake_failed alert: a failed attempt of
// a linked peer, recorded and logged once per change. It reports whether
// it took the alert (nothing else logs it then).
func (h *Host) handshakeFailed(a core.Alert) bool {
	l := h.links[a.Peer]
	if l == nil || a.Err == nil || !countsAgainst(a.Err) {
		return false
	}
	h.failing[a.Peer] = l
	if l.tries.failed(a.Peer, a.Err, time.Now()) {
		h.log.Warn("peer handshake failed; calls that need the peer are refused with this error, and the next one after the backoff tries again",
			"failure_type", "handshake_failed", "peer", a.Peer, "error", a.Err.Error(), "failed_attempts", l.tries.failures, "retry_in", l.tries.delay.String())
	}
	return true
}

// watchRecoveries ends the failures of the links connected since: it runs
// after each Ready, over the failing links only.
func (h *Host) watchRecoveries() {
	for name, l := range h.failing {
		if h.links[name] != l {
			delete(h.failing, name) // removed or replaced
			continue
		}
		if h.core.Connected(name) {
			delete(h.failing, name)
			h.log.Info("peer handshake succeeded after failing", "peer", name, "failed_attempts", l.tries.succeeded())
		}
	}
}
