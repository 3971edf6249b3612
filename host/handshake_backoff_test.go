package host

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/custody-dev/custody/client"
	"github.com/custody-dev/custody/core"
)

// A link's failed attempts: within the backoff a call is refused with the
// last failure; the backoff doubles from its floor to its cap; a failure
// is to be logged only when it differs from the one logged last; success
// ends it all.
func TestAttemptsBackOffAndLogOncePerChange(t *testing.T) {
	var a attempts
	t0 := time.Unix(1000, 0)
	require.NoError(t, a.refusal(t0), "no failure yet: the call may start an attempt")
	cause := errors.New("region outside peer_dirs")
	var delays []time.Duration
	logged := 0
	at := t0
	for range 10 {
		require.NoError(t, a.refusal(at), "the backoff passed")
		if a.failed("p", cause, at) {
			logged++
		}
		delays = append(delays, a.delay)
		err := a.refusal(at.Add(a.delay - time.Nanosecond))
		require.ErrorIs(t, err, ErrHandshakeFailed)
		require.ErrorIs(t, err, cause)
		assert.Equal(t, `peer "p": handshake failed: region outside peer_dirs`, err.Error())
		at = at.Add(a.delay)
	}
	ms := time.Millisecond
	assert.Equal(t, []time.Duration{10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms, 1280 * ms, 2000 * ms, 2000 * ms}, delays)
	assert.Equal(t, 1, logged, "ten attempts, one failure")
	assert.True(t, a.failed("p", errors.New("connection refused"), at), "a new failure is logged")
	assert.True(t, a.failed("p", cause, at), "and changing back is a change")
	assert.Equal(t, 12, a.succeeded())
	require.NoError(t, a.refusal(at))
	assert.True(t, a.failed("p", cause, at), "after a success, the failure is news again")
	assert.Equal(t, minHandshakeBackoff, a.delay, "and the backoff starts anew")
}

// The log tells failures apart by what failed, not by the local port of
// the connection each attempt opens anew.
func TestFailureKeyIgnoresTheLocalAddress(t *testing.T) {
	reset := func(port int) error {
		return fmt.Errorf("peer %q rank 0: peer metadata at 127.0.0.1:9: %w", "p", &net.OpError{
			Op: "read", Net: "tcp", Source: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port},
			Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9}, Err: syscall.ECONNRESET,
		})
	}
	assert.Equal(t, failureKey(reset(40000)), failureKey(reset(40001)))
	assert.NotContains(t, failureKey(reset(40000)), "40000")
	assert.NotEqual(t, failureKey(reset(40000)), failureKey(errors.New("another failure")))
}

// A failed attempt's error is FailedPrecondition whatever its cause's own
// code (a fetch's deadline, a transport's refusal), with the ErrorInfo
// that names it and its peer; a cause that is this host's passing state
// (a fence, a restart, the peer removed) is never recorded as one.
func TestHandshakeFailureCodes(t *testing.T) {
	for _, cause := range []error{errors.New("deadline exceeded"), core.ErrUnknownOutcome, errors.New("connection refused")} {
		err := engineErr(fmt.Errorf("expect receive %q: %w", "r1", &handshakeError{peer: "p", err: cause}))
		assert.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", cause)
		assert.Contains(t, status.Convert(err).Message(), `peer "p": handshake failed: `+cause.Error())
		var info *errdetails.ErrorInfo
		for _, d := range status.Convert(err).Details() {
			if i, ok := d.(*errdetails.ErrorInfo); ok {
				info = i
			}
		}
		require.NotNil(t, info, "%v", cause)
		assert.Equal(t, client.ErrorDomain, info.GetDomain())
		assert.Equal(t, client.ReasonHandshakeFailed, info.GetReason())
		assert.Equal(t, "p", info.GetMetadata()["peer"])
	}
	assert.True(t, countsAgainst(errors.New("connection refused")), "the peer's own failure counts")
	for _, transient := range []error{ErrRestarting, core.ErrFenced, core.ErrNotAttached, core.ErrPeerRemoved} {
		assert.False(t, countsAgainst(fmt.Errorf("connect peer: %w", transient)), "%v", transient)
	}
	assert.Empty(t, status.Convert(engineErr(fmt.Errorf("free: %w", core.ErrHeld))).Details(), "a Busy carries no ErrorInfo")
}

// A peer whose handshake can never succeed (its region lies outside the
// decode transport's peer_dirs): once the first attempt failed, the engine
// hears that attempt's own error, naming the peer and the cause, instead of
// "in progress"; calls within the backoff start no attempt and take
// nothing; the failure is logged once however often it recurs.
func TestFailedHandshakeIsReportedWithItsCauseAndRetriedWithBackoff(t *testing.T) {
	prefill := startHost(t, "prefill", 8, nil)
	decode := startHost(t, "decode", 8, nil, "peer_dirs", t.TempDir()) // none of prefill's files
	db, err := decode.c.Alloc(decode.ctx(), decode.poolID, 4)
	require.NoError(t, err)
	require.NoError(t, decode.c.ConnectPeer(decode.ctx(), "prefill", client.RemoteRank{Address: prefill.h.MetadataAddr(), Pool: "kv"}))
	expectReceive := func(id string) error {
		return decode.c.ExpectReceive(decode.ctx(), id, tok(id), "prefill", decode.poolID, db[:2], 1, time.Minute)
	}
	// Right after ConnectPeer the first attempt may still run: in progress.
	if err = expectReceive("w"); errors.Is(err, client.ErrUnavailable) {
		assert.Contains(t, err.Error(), "in progress")
	} else {
		require.ErrorIs(t, err, client.ErrHandshakeFailed, "%v", err)
	}
	// The attempt's end is the event: a read waits for it and is reported
	// failed with its error (the host records the failure before it reports
	// the read), or is refused with it when the attempt failed first.
	assert.Contains(t, decode.readOrRefused("r", client.Part{Pool: decode.poolID, Local: db[2:], Remote: []uint32{0, 1}}), "lies outside the directories")
	err = expectReceive("w")
	require.ErrorIs(t, err, client.ErrHandshakeFailed, "%v", err)
	assert.Equal(t, codes.FailedPrecondition, status.Code(err))
	assert.NotErrorIs(t, err, client.ErrBusy)
	assert.Contains(t, err.Error(), `peer "prefill": handshake failed`)
	assert.Contains(t, err.Error(), "lies outside the directories this agent may open for peers")

	// Calls keep hearing it; those within a backoff start no attempt, and
	// take nothing. Two hundred calls used to be two hundred attempts and
	// warnings.
	attempts := func() float64 {
		return testutil.ToFloat64(decode.h.metrics.Failures.WithLabelValues("handshake_failed"))
	}
	before := attempts()
	for i := range 200 {
		require.ErrorIs(t, expectReceive("w"), client.ErrHandshakeFailed, "call %d", i)
	}
	require.NoError(t, decode.c.Free(decode.ctx(), decode.poolID, db), "the blocks are the engine's")
	// 200 calls over at most a few seconds: the backoff, doubling to 2 s,
	// allows a dozen attempts (each one a failure), never one per call.
	assert.Less(t, attempts()-before, 50.0, "attempts for 200 calls")
	assert.Equal(t, 1, decode.logs.count("peer handshake failed"), "logged once")
	assert.Equal(t, 0, decode.logs.count("transfer failure"), "and not as an alert per attempt")
}

// readOrRefused reads part from peer (default "prefill") as request id,
// whose handshake fails: the read waits for the attempt and is reported
// failed, its blocks invalid; or, when the attempt failed first, it is
// refused with its error (within the backoff), taking nothing. It returns
// the failure's text, either way.
func (th *testHost) readOrRefused(id string, part client.Part, peer ...string) string {
	t := th.t
	t.Helper()
	p := "prefill"
	if len(peer) > 0 {
		p = peer[0]
	}
	err := th.c.Read(th.ctx(), id, tok(id), p, false, part)
	if err != nil {
		require.ErrorIs(t, err, client.ErrHandshakeFailed)
		return err.Error()
	}
	f := th.waitFinished(id)
	require.Equal(t, []string{id}, failedIDs(f))
	assert.ElementsMatch(t, refsOf(part.Pool, part.Local), f.InvalidBlocks)
	return f.Failed[0].Reason
}

// A peer that comes up after the decode's ConnectPeer connects at the first
// call after the backoff; the recovery is logged once.
func TestPeerThatComesUpLaterConnects(t *testing.T) {
	prefill := startHost(t, "prefill", 8, nil)
	decode := startHost(t, "decode", 8, func(c *Config) { c.LogLevel = "info" })
	// Not up yet: nothing listens at the address, for now.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	require.NoError(t, decode.c.ConnectPeer(decode.ctx(), "prefill", client.RemoteRank{Address: addr, Pool: "kv"}))
	db, err := decode.c.Alloc(decode.ctx(), decode.poolID, 3)
	require.NoError(t, err)
	// The attempt's end is the event (a read waits for it), as above.
	assert.Contains(t, decode.readOrRefused("r0", client.Part{Pool: decode.poolID, Local: db[2:], Remote: []uint32{0}}), addr)
	err = decode.c.ExpectReceive(decode.ctx(), "w", tok("w"), "prefill", decode.poolID, db[:2], 1, time.Minute)
	require.ErrorIs(t, err, client.ErrHandshakeFailed)
	assert.Contains(t, err.Error(), addr, "the cause names the address tried")

	// It comes up: ConnectPeer with its address starts an attempt at once.
	require.NoError(t, decode.c.ConnectPeer(decode.ctx(), "prefill", client.RemoteRank{Address: prefill.h.MetadataAddr(), Pool: "kv"}))
	src, dst := pull(t, prefill, decode, "r1", 2)
	f := decode.waitFinished("r1")
	require.Empty(t, f.Failed)
	sameBlocks(t, src, decode.read(dst), "r1")
	assert.Equal(t, 1, decode.logs.count("peer handshake failed"))
	assert.Equal(t, 1, decode.logs.count("peer handshake succeeded after failing"))
}
