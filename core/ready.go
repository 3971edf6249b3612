package core

import (
	"fmt"
	"time"
)

// Ready is what one Poll round (or a Ready call) hands the caller, in the manner of raft's
// Ready: the finished report the engine consumes (vLLM's get_finished) and
// the actions the runtime must take. Every request appears at most once in
// all Ready values a Core ever returns; blocks listed in a Ready moved back
// to the engine in that same round, and not before.
type Ready struct {
	// FinishedSending: sends (Write or ExpectSend) that finished: every handle
	// DONE and released, and the consumers notified or the lease expired.
	// Their blocks are back with the engine.
	FinishedSending []RequestID
	// FinishedReceiving: reads whose every handle ended DONE and was
	// released, and push receives (ExpectReceive) whose every producer
	// reported its writes. Their blocks are back with the engine and hold
	// the bytes.
	FinishedReceiving []RequestID
	// Failed: requests that failed, reported once every handle of theirs was
	// terminal and released (rule 3). Their blocks are back with the engine
	// except those listed in Quarantined. vLLM reports a failed receive in
	// finished_recving as well; a host mapping to vLLM adds them there.
	Failed []Failure
	// InvalidBlocks: the blocks of the failed receives (reads and push
	// receives) in Failed, whose bytes are undefined: the engine must
	// recompute them. Listed in the same Ready as the failure, never
	// earlier. A quarantined block is listed in Quarantined instead.
	InvalidBlocks []BlockRef
	// Quarantined: blocks a force-released handle may still touch
	// (EscalateQuarantine), or a producer may still write into after its
	// push receive failed where no fence can stop it (ExpectReceive). The
	// engine must never use them again; they are not back with the engine.
	// They are listed in the same Ready as their request's failure.
	Quarantined []BlockRef
	// Fence lists transport epochs the runtime must fence (kill the
	// transport process) because a handle was held past the cap, a call's
	// outcome is unknown, or a failed push receive's producer may still
	// write into its blocks (ExpectReceive). It is repeated every round
	// until the caller reports the epoch fenced (Fenced), so acting on it
	// must be idempotent.
	Fence []Epoch
	// Alerts are the events worth a log line, one failure type each.
	Alerts []Alert
	// Work is the transport calls to make now, in this order where they
	// share a transport (a Cancel before the Poll that follows it); report
	// each one's outcome with Done.
	Work []Work
	// Next is when the Core needs its next round (Poll), as of this Ready:
	// the latest Ready's Next holds until the next command or Done.
	Next Next
}

// Next is the Core's schedule: what the caller waits for before its next
// Poll. Whatever When says, a command, a Done or a transport wake-up may
// run a round earlier; a round is never wrong, only wasted.
type Next struct {
	When Wait
	// At is the earliest lease or hold-cap deadline, zero when none: a
	// round must run by then unless When asks for one earlier.
	At time.Time
	// Outstanding counts the Work handed out and not yet reported with
	// Done, of every epoch.
	Outstanding int
}

// Wait says what the next round waits for.
type Wait uint8

const (
	// WaitIdle: nothing is in flight. No round is needed until a command,
	// or At.
	WaitIdle Wait = iota
	// WaitResults: the last round's queries (Notifications, Events, Poll)
	// are out; a round before they are reported would skip them. Run one
	// as soon as they are reported.
	WaitResults
	// WaitTransport: transfers, notifications or Work are in flight that
	// the transport announces when they change. Run a round when it wakes
	// the caller (sdk.Waker), or after a short backoff where it cannot.
	WaitTransport
	// WaitRetry: work no transport announces is due (a release to retry, a
	// retired peer's natives to release, a fence asked for and not yet
	// reported). Run a round after a short backoff, wake-ups or not.
	WaitRetry
)

func (w Wait) String() string {
	switch w {
	case WaitIdle:
		return "idle"
	case WaitResults:
		return "results"
	case WaitTransport:
		return "transport"
	case WaitRetry:
		return "retry"
	}
	return fmt.Sprintf("Wait(%d)", uint8(w))
}

// Empty reports whether the round produced nothing.
func (r *Ready) Empty() bool {
	return len(r.FinishedSending) == 0 && len(r.FinishedReceiving) == 0 &&
		len(r.Failed) == 0 && len(r.InvalidBlocks) == 0 && len(r.Quarantined) == 0 &&
		len(r.Fence) == 0 && len(r.Alerts) == 0 && len(r.Work) == 0
}

// Failure is one failed request and why.
type Failure struct {
	Request RequestID
	// Sending is true for a failed Write or ExpectSend, false for a Read or
	// ExpectReceive.
	Sending bool
	// Reason is the first failure seen (a handle's FAILED reason, a setup
	// or handshake error, ErrPeerRemoved, ErrHoldCap, ...).
	Reason error
	// TimedOut: the request failed because a bound ran out, its hold cap
	// (ErrHoldCap) or its lease (ErrLeaseExpired), not because a transfer
	// or a call failed.
	TimedOut bool
	// Invalid and Quarantined are this request's entries of the Ready's
	// InvalidBlocks and Quarantined.
	Invalid, Quarantined []BlockRef
}

// AlertLevel orders alerts for logging.
type AlertLevel uint8

const (
	// AlertWarn: a failure core recovered from or reports through a request.
	AlertWarn AlertLevel = iota + 1
	// AlertError: core gave up proving safety (a force-release) or a native
	// resource may leak.
	AlertError
)

func (l AlertLevel) String() string {
	switch l {
	case AlertWarn:
		return "warn"
	case AlertError:
		return "error"
	}
	return fmt.Sprintf("AlertLevel(%d)", uint8(l))
}

// Alert is one event worth a log line. Kind names the failure type
// ("transfer_failed", "transfer_release_failed", ...: the failure_type of
// the host's log and metrics); the other fields are set where they apply.
type Alert struct {
	Level   AlertLevel
	Kind    string
	Peer    string
	Request RequestID
	Handle  Ref
	Err     error
}

func (a Alert) String() string {
	return fmt.Sprintf("%s %s peer=%q request=%q handle=%v: %v", a.Level, a.Kind, a.Peer, a.Request, a.Handle, a.Err)
}
