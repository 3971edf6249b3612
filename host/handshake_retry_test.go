package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/custody-dev/custody/client"
	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/sdk"
)

// metaProxy stands between a host and a peer's metadata endpoint: it counts
// the fetches (one connection each: fetches keep none), and can refuse them
// (down: each connection closed at once) or hold them until released.
type metaProxy struct {
	ln      net.Listener
	target  string
	accepts atomic.Int64
	mu      sync.Mutex
	down    bool
	hold    chan struct{}
	wg      sync.WaitGroup
}

func newMetaProxy(t *testing.T, target string) *metaProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &metaProxy{ln: ln, target: target}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.accepts.Add(1)
			p.mu.Lock()
			down, hold := p.down, p.hold
			p.mu.Unlock()
			p.wg.Add(1)
			go func() { defer p.wg.Done(); p.serve(c, down, hold) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.release(); p.wg.Wait() })
	return p
}

func (p *metaProxy) serve(c net.Conn, down bool, hold chan struct{}) {
	defer c.Close()
	if hold != nil {
		<-hold
	}
	if down {
		return
	}
	d, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer d.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(d, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, d); done <- struct{}{} }()
	<-done // either side ended: closing both ends the other copy
	c.Close()
	d.Close()
	<-done
}

func (p *metaProxy) addr() string { return p.ln.Addr().String() }

func (p *metaProxy) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
}

// holdAll makes the fetches from now on wait until release.
func (p *metaProxy) holdAll() {
	p.mu.Lock()
	p.hold = make(chan struct{})
	p.mu.Unlock()
}

func (p *metaProxy) release() {
	p.mu.Lock()
	if p.hold != nil {
		close(p.hold)
		p.hold = nil
	}
	p.mu.Unlock()
}

// attemptProbe drives a host's handshake attempts with one peer: each
// backoff the host arms arrives on waits (and the attempt after it starts
// only when the test fires it), each attempt's outcome on outcomes.
type attemptProbe struct {
	t        *testing.T
	waits    chan armedWait
	outcomes chan error
}

type armedWait struct {
	d    time.Duration
	fire chan time.Time
}

func probeAttempts(t *testing.T, th *testHost, peer string) *attemptProbe {
	t.Helper()
	p := &attemptProbe{t: t, waits: make(chan armedWait, 256), outcomes: make(chan error, 256)}
	require.NoError(t, th.h.do(th.ctx(), func(context.Context) error {
		th.h.retry.after = func(d time.Duration) (<-chan time.Time, func() bool) {
			w := armedWait{d: d, fire: make(chan time.Time, 1)}
			p.waits <- w
			return w.fire, func() bool { return true }
		}
		th.h.retry.settled = func(name string, err error) {
			if name == peer {
				p.outcomes <- err
			}
		}
		return nil
	}))
	return p
}

// outcome is the next attempt's outcome.
func (p *attemptProbe) outcome() error {
	p.t.Helper()
	select {
	case err := <-p.outcomes:
		return err
	case <-time.After(20 * time.Second):
		p.t.Fatal("no handshake attempt ended within 20s")
		return nil
	}
}

// armed is the backoff the host armed next.
func (p *attemptProbe) armed() armedWait {
	p.t.Helper()
	select {
	case w := <-p.waits:
		return w
	case <-time.After(20 * time.Second):
		p.t.Fatal("no backoff armed within 20s")
		return armedWait{}
	}
}

// fire ends the backoff w: the attempt after it starts.
func (w armedWait) fireNow() { w.fire <- time.Now() }

func expectReceive(th *testHost, id string, blocks []uint32) error {
	return th.c.ExpectReceive(th.ctx(), id, tok(id), "prefill", th.poolID, blocks, 1, time.Second)
}

// A peer whose handshake cannot succeed (its region lies outside the
// decode transport's peer_dirs): the engine hears "in progress" only while
// the first attempt runs, then the attempt's own error, naming the peer
// and the cause; its calls start no attempt, the host retries with a
// backoff doubling to its cap, and logs a failure only when it changes.
func TestFailedHandshakeIsReportedWithItsCauseAndRetriedWithBackoff(t *testing.T) {
	prefill := startHost(t, "prefill", 8, nil)
	decode := startHost(t, "decode", 8, nil, "peer_dirs", t.TempDir()) // none of prefill's files
	px := newMetaProxy(t, prefill.h.MetadataAddr())
	p := probeAttempts(t, decode, "prefill")
	db, err := decode.c.Alloc(decode.ctx(), decode.poolID, 4)
	require.NoError(t, err)

	px.holdAll()
	require.NoError(t, decode.c.ConnectPeer(decode.ctx(), "prefill", client.RemoteRank{Address: px.addr(), Pool: "kv"}))
	err = expectReceive(decode, "w0", db[:2])
	require.ErrorIs(t, err, client.ErrUnavailable, "the first attempt runs: %v", err)
	assert.NotErrorIs(t, err, client.ErrHandshakeFailed)
	assert.Contains(t, err.Error(), "in progress")
	px.release()
	require.Error(t, p.outcome())

	// (a) The attempt's own error: which peer, what failed.
	err = expectReceive(decode, "w1", db[:2])
	require.ErrorIs(t, err, client.ErrHandshakeFailed, "%v", err)
	assert.Equal(t, codes.FailedPrecondition, status.Code(err))
	assert.NotErrorIs(t, err, client.ErrBusy)
	assert.NotErrorIs(t, err, client.ErrUnavailable)
	assert.Contains(t, err.Error(), `peer "prefill": handshake failed`)
	assert.Contains(t, err.Error(), "lies outside the directories this agent may open for peers")
	// A read fails at once, with the same cause, its blocks invalid.
	require.NoError(t, decode.c.Read(decode.ctx(), "r1", tok("r1"), "prefill", false, client.Part{Pool: decode.poolID, Local: db[2:], Remote: []uint32{0, 1}}))
	f := decode.waitFinished("r1")
	require.Equal(t, []string{"r1"}, failedIDs(f))
	assert.Contains(t, f.Failed[0].Reason, "lies outside the directories")
	assert.ElementsMatch(t, refsOf(decode.poolID, db[2:]), f.InvalidBlocks)

	// (b) Calls during the backoff start no attempt: one fetch so far, one
	// backoff armed, no outcome.
	for i := range 20 {
		require.ErrorIs(t, expectReceive(decode, "w1", db[:2]), client.ErrHandshakeFailed, "call %d", i)
	}
	assert.EqualValues(t, 1, px.accepts.Load(), "fetches")
	assert.Len(t, p.outcomes, 0, "attempts ended")
	w := p.armed()
	assert.Equal(t, minHandshakeBackoff, w.d)
	assert.Len(t, p.waits, 0, "backoffs armed")

	// The host retries on its own, doubling the backoff to the cap.
	var waits []time.Duration
	for w.d < maxHandshakeBackoff || len(waits) < 10 {
		w.fireNow()
		require.Error(t, p.outcome())
		w = p.armed()
		waits = append(waits, w.d)
	}
	assert.Equal(t, []time.Duration{20, 40, 80, 160, 320, 640, 1280, 2000, 2000, 2000}, scaleMs(waits))
	assert.EqualValues(t, 11, px.accepts.Load(), "one fetch per attempt")

	// (c) Logged once for eleven attempts, and no per-attempt alert either.
	assert.Equal(t, 1, decode.logs.count("peer handshake failed"))
	assert.Equal(t, 1, decode.logs.count("handshake_failed"))
	// A different failure is logged, and changing back is a change again.
	px.setDown(true)
	w.fireNow()
	require.ErrorContains(t, p.outcome(), "peer metadata at "+px.addr())
	assert.Equal(t, 2, decode.logs.count("peer handshake failed"))
	err = expectReceive(decode, "w2", db[:2])
	require.ErrorIs(t, err, client.ErrHandshakeFailed)
	assert.Contains(t, err.Error(), "peer metadata at "+px.addr(), "the latest attempt's failure")
	px.setDown(false)
	p.armed().fireNow()
	require.ErrorContains(t, p.outcome(), "lies outside the directories")
	assert.Equal(t, 3, decode.logs.count("peer handshake failed"))
}

// scaleMs turns backoffs into milliseconds, for a readable comparison.
func scaleMs(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d / time.Millisecond
	}
	return out
}

// (d) A peer that comes up after the decode's ConnectPeer connects at the
// next attempt after it is reachable; the recovery is logged once.
func TestPeerThatComesUpLaterConnectsAtTheNextAttempt(t *testing.T) {
	prefill := startHost(t, "prefill", 8, nil)
	decode := startHost(t, "decode", 8, func(c *Config) { c.LogLevel = "info" })
	px := newMetaProxy(t, prefill.h.MetadataAddr())
	px.setDown(true) // not up yet
	p := probeAttempts(t, decode, "prefill")
	db, err := decode.c.Alloc(decode.ctx(), decode.poolID, 2)
	require.NoError(t, err)

	require.NoError(t, decode.c.ConnectPeer(decode.ctx(), "prefill", client.RemoteRank{Address: px.addr(), Pool: "kv"}))
	require.Error(t, p.outcome())
	err = expectReceive(decode, "w1", db)
	require.ErrorIs(t, err, client.ErrHandshakeFailed)
	assert.Contains(t, err.Error(), px.addr(), "the cause names the address tried")

	px.setDown(false) // prefill is reachable now
	p.armed().fireNow()
	require.NoError(t, p.outcome())
	require.NoError(t, expectReceive(decode, "w2", db), "connected: the receive is recorded")
	assert.Equal(t, 1, decode.logs.count("peer handshake failed"))
	assert.Equal(t, 1, decode.logs.count("peer handshake succeeded after failing"))

	src, dst := pull(t, prefill, decode, "r1", 2)
	f := decode.waitFinished("r1")
	require.Empty(t, f.Failed)
	sameBlocks(t, src, decode.read(dst), "r1")
}

// (e) ConnectPeer and RemovePeer reset the backoff: the attempt they start
// runs at once, the wait armed before starts nothing, the next backoff is
// the first again; and ConnectPeer may correct a failing peer's ranks.
func TestConnectAndRemovePeerResetTheBackoff(t *testing.T) {
	prefill := startHost(t, "prefill", 8, nil)
	decode := startHost(t, "decode", 8, nil)
	px := newMetaProxy(t, prefill.h.MetadataAddr())
	px.setDown(true)
	p := probeAttempts(t, decode, "prefill")
	db, err := decode.c.Alloc(decode.ctx(), decode.poolID, 2)
	require.NoError(t, err)
	via := client.RemoteRank{Address: px.addr(), Pool: "kv"}
	connect := func(r client.RemoteRank) { require.NoError(t, decode.c.ConnectPeer(decode.ctx(), "prefill", r)) }

	connect(via)
	require.Error(t, p.outcome())
	for _, want := range []time.Duration{10, 20} {
		w := p.armed()
		require.Equal(t, want*time.Millisecond, w.d)
		w.fireNow()
		require.Error(t, p.outcome())
	}
	stale := p.armed()
	require.Equal(t, 40*time.Millisecond, stale.d)

	// ConnectPeer again: an attempt at once, "in progress" until it ends.
	px.holdAll()
	connect(via)
	require.ErrorIs(t, expectReceive(decode, "w1", db), client.ErrUnavailable, "a new attempt runs")
	px.release()
	require.Error(t, p.outcome())
	stale.fireNow() // ended by ConnectPeer: starts nothing
	w := p.armed()
	assert.Equal(t, minHandshakeBackoff, w.d, "reset by ConnectPeer")
	w.fireNow()
	require.Error(t, p.outcome())
	stale = p.armed()
	assert.Equal(t, 20*time.Millisecond, stale.d)

	// RemovePeer, then ConnectPeer: the same.
	require.NoError(t, decode.c.RemovePeer(decode.ctx(), "prefill"))
	stale.fireNow() // ended by RemovePeer: starts nothing
	connect(via)
	require.Error(t, p.outcome())
	w = p.armed()
	assert.Equal(t, minHandshakeBackoff, w.d, "reset by RemovePeer")
	assert.EqualValues(t, 6, px.accepts.Load(), "one fetch per attempt, none from the waits ended")

	// A failing peer's ranks may be corrected without RemovePeer.
	connect(client.RemoteRank{Address: prefill.h.MetadataAddr(), Pool: "kv"})
	require.NoError(t, p.outcome())
	require.NoError(t, expectReceive(decode, "w2", db))
	w.fireNow() // ended by ConnectPeer
	assert.EqualValues(t, 6, px.accepts.Load())
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

// A failed attempt is FailedPrecondition whatever its cause's own code (a
// fetch's deadline, a transport's refusal), except a cause transient on
// this host, which stays Unavailable; only FailedPrecondition carries the
// ErrorInfo.
func TestHandshakeFailureCodes(t *testing.T) {
	for _, tc := range []struct {
		cause error
		code  codes.Code
	}{
		{context.DeadlineExceeded, codes.FailedPrecondition},
		{sdk.ErrInvalidArgument, codes.FailedPrecondition},
		{errors.New("connection refused"), codes.FailedPrecondition},
		{ErrRestarting, codes.Unavailable},
		{core.ErrFenced, codes.Unavailable},
		{sdk.ErrRemoteDisconnect, codes.Unavailable},
	} {
		err := engineErr(fmt.Errorf("expect receive %q: %w", "r1", &handshakeError{peer: "p", err: tc.cause}))
		assert.Equal(t, tc.code, status.Code(err), "%v", tc.cause)
		assert.Contains(t, status.Convert(err).Message(), `peer "p": handshake failed: `+tc.cause.Error())
		var reason string
		for _, d := range status.Convert(err).Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == client.ErrorDomain {
				reason = info.GetReason()
				assert.Equal(t, "p", info.GetMetadata()["peer"])
			}
		}
		if tc.code == codes.FailedPrecondition {
			assert.Equal(t, client.ReasonHandshakeFailed, reason, "%v", tc.cause)
		} else {
			assert.Empty(t, reason, "%v", tc.cause)
		}
	}
}
