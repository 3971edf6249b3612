package fake

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/sdk"
)

// drainNotes collects n notifications from a, failing if they do not come.
func drainNotes(t testing.TB, a *Transport, n int) []sdk.Notification {
	t.Helper()
	var got []sdk.Notification
	require.Eventually(t, func() bool {
		more, err := a.Notifications(ctx, 0)
		require.NoError(t, err)
		got = append(got, more...)
		return len(got) >= n
	}, wait, 100*time.Microsecond, "got %d of %d notifications", len(got), n)
	return got
}

// TestPostNotification checks that a post's notification reaches the peer
// exactly once, and only after the transfer is DONE.
func TestPostNotification(t *testing.T) {
	p := newPair(t, 1<<20, map[string]string{"chunk": "4096"}, nil)
	h := postOne(t, p.a, p.whole(sdk.OpWrite, []byte("block 7 ready")))
	got := drainNotes(t, p.b, 1)
	// The notification arrived, so the transfer must already be DONE.
	require.Equal(t, sdk.StateDone, poll(t, p.a, h).State)
	require.Equal(t, []sdk.Notification{{From: "a", Message: []byte("block 7 ready")}}, got)
	require.Equal(t, readFile(t, p.aPath), readFile(t, p.bPath))
	// A second transfer's notification is the only other one: the first is
	// not delivered again.
	h2 := postOne(t, p.a, p.whole(sdk.OpWrite, []byte("again")))
	require.Equal(t, []sdk.Notification{{From: "a", Message: []byte("again")}}, drainNotes(t, p.b, 1))
	release(t, p.a, h, h2)
	more, err := p.b.Notifications(ctx, 0)
	require.NoError(t, err)
	require.Empty(t, more)
}

// TestSendNotificationsOrder checks delivery once and in order per sender,
// the max argument, and per-item errors.
func TestSendNotificationsOrder(t *testing.T) {
	p := newPair(t, 4096, nil, nil)
	var msgs []sdk.OutboundNotification
	for i := 0; i < 100; i++ {
		msgs = append(msgs, sdk.OutboundNotification{Peer: p.peer, Message: []byte(fmt.Sprint(i))})
	}
	msgs = append(msgs,
		sdk.OutboundNotification{Peer: 999999999, Message: []byte("x")},
		sdk.OutboundNotification{Peer: p.peer, Message: make([]byte, maxNotificationBytes+1)},
	)
	errs, err := p.a.SendNotifications(ctx, msgs)
	require.NoError(t, err)
	require.Len(t, errs, len(msgs))
	for _, e := range errs[:100] {
		require.NoError(t, e)
	}
	require.ErrorIs(t, errs[100], sdk.ErrInvalidArgument)
	require.ErrorIs(t, errs[101], sdk.ErrInvalidArgument)

	require.Eventually(t, func() bool {
		p.b.mu.Lock()
		defer p.b.mu.Unlock()
		return p.b.book.Inbox() == 100
	}, wait, time.Millisecond)
	first, err := p.b.Notifications(ctx, 10)
	require.NoError(t, err)
	require.Len(t, first, 10)
	rest, err := p.b.Notifications(ctx, 0)
	require.NoError(t, err)
	all := append(first, rest...)
	require.Len(t, all, 100)
	for i, n := range all {
		require.Equal(t, sdk.Notification{From: "a", Message: []byte(fmt.Sprint(i))}, n)
	}
}

// TestSendToGonePeer reports REMOTE_DISCONNECT when the peer's socket is
// gone.
func TestSendToGonePeer(t *testing.T) {
	a := open(t, "a", nil)
	b := New()
	require.NoError(t, b.Open(ctx, sdk.OpenRequest{Agent: "b", Params: map[string]string{"dir": t.TempDir(), "peer_dirs": os.TempDir()}}))
	id := loadPeer(t, a, b)
	require.NoError(t, b.Close(ctx))
	errs, err := a.SendNotifications(ctx, []sdk.OutboundNotification{{Peer: id, Message: []byte("x")}})
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], sdk.ErrRemoteDisconnect)
	_, _ = a.UnloadPeers(ctx, []sdk.PeerID{id})
}

// fillQueue fills a's notification socket queue with datagrams from a
// socket of the test's own, while a's receiver is held (a.mu locked), and
// returns how many it queued. The receiver takes one datagram and then
// waits for a.mu, so fillQueue first waits until the queue is empty again
// (the receiver holds the first datagram), then queues datagrams without
// waiting until the kernel refuses one for want of room: the queue is full
// when it returns, whatever the scheduler did.
func fillQueue(t *testing.T, a *Transport) int {
	t.Helper()
	name := fmt.Sprintf("@custody-fake-test/%d/%d", pid, socketSeq.Add(1))
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	msg := append([]byte{0, 6}, "filler"...)
	_, err = c.WriteToUnix(msg, &net.UnixAddr{Name: a.addr, Net: "unixgram"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return queued(t, a.conn) == 0 }, 10*time.Second, 50*time.Microsecond,
		"the receiver never took the first datagram")
	rc, err := c.SyscallConn()
	require.NoError(t, err)
	to := &unix.SockaddrUnix{Name: a.addr}
	for n := 1; ; n++ {
		require.Less(t, n, 1<<16, "the queue never filled")
		var serr error
		require.NoError(t, rc.Write(func(fd uintptr) bool {
			serr = unix.Sendto(int(fd), msg, unix.MSG_DONTWAIT, to)
			return true // never wait for room
		}))
		if errors.Is(serr, unix.EAGAIN) {
			return n
		}
		require.NoError(t, serr)
	}
}

// queued is the size of the next datagram in conn's receive queue, 0 when
// it is empty.
func queued(t *testing.T, conn *net.UnixConn) int {
	t.Helper()
	rc, err := conn.SyscallConn()
	require.NoError(t, err)
	var n int
	var ierr error
	require.NoError(t, rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }))
	require.NoError(t, ierr)
	return n
}

// TestSendWaitsOutAQueueOthersFilled: a sender that finds the peer's queue
// full of other senders' datagrams is sent as soon as the receiver drains
// it, not after sendTimeout. The poller wakes a blocked sender only when
// one of its own datagrams leaves the queue, so without trying again the
// send would sleep the whole timeout and fail with BACKEND although the
// receiver is alive and draining.
func TestSendWaitsOutAQueueOthersFilled(t *testing.T) {
	rx := open(t, "rx", nil)
	var unhold sync.Once
	resume := func() { unhold.Do(rx.mu.Unlock) }
	s := New()
	s.sendRetryHook = resume // the receiver drains once s waits for room
	require.NoError(t, s.Open(ctx, sdk.OpenRequest{Agent: "s", Params: map[string]string{"dir": t.TempDir(), "peer_dirs": os.TempDir()}}))
	t.Cleanup(func() { _ = s.Close(ctx) })
	peer := loadPeer(t, s, rx)
	defer func() { _, _ = s.UnloadPeers(ctx, []sdk.PeerID{peer}) }()

	rx.mu.Lock() // hold the receiver: its queue fills up
	t.Cleanup(resume)
	fillers := fillQueue(t, rx)
	errs, err := s.SendNotifications(ctx, []sdk.OutboundNotification{{Peer: peer, Message: []byte("m")}})
	resume()
	require.NoError(t, err)
	require.NoError(t, errs[0], "the receiver drained its queue while the send waited")
	got := drainNotes(t, rx, fillers+1)
	require.Equal(t, sdk.Notification{From: "s", Message: []byte("m")}, got[len(got)-1])
	for _, n := range got[:len(got)-1] {
		require.Equal(t, "filler", n.From)
	}
}

// TestSendFailureKeepsOrder: when one message of a call fails, the call's
// later messages to that peer are not sent, so that sending the failed
// ones again, in order, delivers every message once and in order.
func TestSendFailureKeepsOrder(t *testing.T) {
	rx := open(t, "rx", nil)
	other := open(t, "other", nil)
	s := New()
	failed := false
	s.sendFault = func(msg []byte) error {
		if string(msg) == "5" && !failed {
			failed = true
			return os.ErrDeadlineExceeded // as a send that found no room in time
		}
		return nil
	}
	require.NoError(t, s.Open(ctx, sdk.OpenRequest{Agent: "s", Params: map[string]string{"dir": t.TempDir(), "peer_dirs": os.TempDir()}}))
	t.Cleanup(func() { _ = s.Close(ctx) })
	toRx, toOther := loadPeer(t, s, rx), loadPeer(t, s, other)
	defer func() { _, _ = s.UnloadPeers(ctx, []sdk.PeerID{toRx, toOther}) }()

	var msgs []sdk.OutboundNotification
	for i := 0; i < 10; i++ {
		msgs = append(msgs, sdk.OutboundNotification{Peer: toRx, Message: []byte(fmt.Sprint(i))})
	}
	msgs = append(msgs, sdk.OutboundNotification{Peer: toOther, Message: []byte("elsewhere")})
	errs, err := s.SendNotifications(ctx, msgs)
	require.NoError(t, err)
	for i, e := range errs {
		switch {
		case i >= 5 && i < 10:
			require.ErrorIs(t, e, sdk.ErrBackend, "message %d", i)
		default:
			require.NoError(t, e, "message %d: a failure to one peer does not hold back another", i)
		}
	}
	errs, err = s.SendNotifications(ctx, msgs[5:10])
	require.NoError(t, err)
	for _, e := range errs {
		require.NoError(t, e)
	}
	got := drainNotes(t, rx, 10)
	require.Len(t, got, 10)
	for i, n := range got {
		require.Equal(t, fmt.Sprint(i), string(n.Message), "message %d: once and in order", i)
	}
	require.Equal(t, []sdk.Notification{{From: "s", Message: []byte("elsewhere")}}, drainNotes(t, other, 1))
}

// TestSocketNameNotReused: an agent that takes the pid and sequence number
// of a dead one, as a later process reusing the pid does, does not take its
// socket name: a peer that still holds the dead agent's metadata gets
// REMOTE_DISCONNECT and the newcomer receives nothing of it.
func TestSocketNameNotReused(t *testing.T) {
	a := open(t, "a", nil)
	before := socketSeq.Load()
	dead := New()
	require.NoError(t, dead.Open(ctx, sdk.OpenRequest{Agent: "b", Params: map[string]string{"dir": t.TempDir(), "peer_dirs": os.TempDir()}}))
	stale := loadPeer(t, a, dead)
	defer func() { _, _ = a.UnloadPeers(ctx, []sdk.PeerID{stale}) }()
	dead.Kill()

	after := socketSeq.Load()
	socketSeq.Store(before) // the newcomer draws the dead agent's number
	newcomer := open(t, "b", nil)
	socketSeq.Store(max(after, socketSeq.Load()))
	require.NotEqual(t, dead.addr, newcomer.addr)

	errs, err := a.SendNotifications(ctx, []sdk.OutboundNotification{{Peer: stale, Message: []byte("0:0")}})
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], sdk.ErrRemoteDisconnect, "a message to the dead agent")
	// A message the newcomer is sent directly arrives alone: the stale one
	// never did.
	fresh := loadPeer(t, a, newcomer)
	defer func() { _, _ = a.UnloadPeers(ctx, []sdk.PeerID{fresh}) }()
	errs, err = a.SendNotifications(ctx, []sdk.OutboundNotification{{Peer: fresh, Message: []byte("end")}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.Equal(t, []sdk.Notification{{From: "a", Message: []byte("end")}}, drainNotes(t, newcomer, 1))
}

// TestManySendersExactlyOnceInOrder: many agents sending batches at once
// overflow the receiver's datagram queue (net.unix.max_dgram_qlen, 10 by
// default); every message still arrives, once, in order per sender, and
// no send fails.
func TestManySendersExactlyOnceInOrder(t *testing.T) {
	const senders, count, batch = 8, 300, 50
	rx := open(t, "rx", nil)
	var wg sync.WaitGroup
	fail := make(chan error, senders*count)
	for i := 0; i < senders; i++ {
		s := open(t, fmt.Sprintf("s%d", i), nil)
		peer := loadPeer(t, s, rx)
		t.Cleanup(func() { _, _ = s.UnloadPeers(ctx, []sdk.PeerID{peer}) })
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < count; k += batch {
				msgs := make([]sdk.OutboundNotification, batch)
				for j := range msgs {
					msgs[j] = sdk.OutboundNotification{Peer: peer, Message: []byte(fmt.Sprint(k + j))}
				}
				errs, err := s.SendNotifications(ctx, msgs)
				if err != nil {
					fail <- err
				}
				for _, e := range errs {
					if e != nil {
						fail <- e
					}
				}
			}
		}()
	}
	wg.Wait()
	close(fail)
	for err := range fail {
		require.NoError(t, err)
	}
	got := drainNotes(t, rx, senders*count)
	next := map[string]int{}
	for _, n := range got {
		require.Equal(t, fmt.Sprint(next[n.From]), string(n.Message), "from %s: once and in order", n.From)
		next[n.From]++
	}
	for i := 0; i < senders; i++ {
		require.Equal(t, count, next[fmt.Sprintf("s%d", i)])
	}
	more, err := rx.Notifications(ctx, 0)
	require.NoError(t, err)
	require.Empty(t, more)
}

// TestSendStopsAtContextEnd: a send never waits past the call's context.
// Two peers' queues are full and stay full; each would cost sendTimeout
// (and BACKEND) if the send ignored the context. Every message the context
// ended before is TIMEOUT, including the later one to the first peer
// (still refused, so order holds), and nothing of them was queued: once
// the receivers drain, each gets its fillers and then the next message.
func TestSendStopsAtContextEnd(t *testing.T) {
	cases := []struct {
		name string
		// ctx returns the call's context and the sender's sendRetryHook
		// (nil for none).
		ctx func(t *testing.T) (context.Context, func())
	}{
		{"deadline passes", func(t *testing.T) (context.Context, func()) {
			c, cancel := context.WithTimeout(ctx, 300*time.Millisecond) // well inside sendTimeout
			t.Cleanup(cancel)
			return c, nil
		}},
		{"canceled while waiting", func(t *testing.T) (context.Context, func()) {
			c, cancel := context.WithCancel(ctx)
			t.Cleanup(cancel)
			return c, cancel // the first try that found no room cancels
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Greater(t, sendTimeout, 300*time.Millisecond)
			call, retry := c.ctx(t)
			rx1, rx2 := open(t, "rx1", nil), open(t, "rx2", nil)
			s := New()
			s.sendRetryHook = retry
			require.NoError(t, s.Open(ctx, sdk.OpenRequest{Agent: "s", Params: map[string]string{"dir": t.TempDir(), "peer_dirs": os.TempDir()}}))
			t.Cleanup(func() { _ = s.Close(ctx) })
			p1, p2 := loadPeer(t, s, rx1), loadPeer(t, s, rx2)
			defer func() { _, _ = s.UnloadPeers(ctx, []sdk.PeerID{p1, p2}) }()

			var fillers []int
			var resumes []func()
			for _, rx := range []*Transport{rx1, rx2} {
				rx.mu.Lock() // hold the receiver: its queue stays full
				resume := sync.OnceFunc(rx.mu.Unlock)
				t.Cleanup(resume)
				resumes = append(resumes, resume)
				fillers = append(fillers, fillQueue(t, rx))
			}
			errs, err := s.SendNotifications(call, []sdk.OutboundNotification{
				{Peer: p1, Message: []byte("1a")},
				{Peer: p2, Message: []byte("2a")},
				{Peer: p1, Message: []byte("1b")},
			})
			require.NoError(t, err)
			for i, e := range errs {
				require.ErrorIs(t, e, sdk.ErrTimeout, "message %d", i)
			}

			for _, resume := range resumes {
				resume()
			}
			for i, rx := range []*Transport{rx1, rx2} {
				peer := []sdk.PeerID{p1, p2}[i]
				errs, err := s.SendNotifications(ctx, []sdk.OutboundNotification{{Peer: peer, Message: []byte("next")}})
				require.NoError(t, err)
				require.NoError(t, errs[0])
				got := drainNotes(t, rx, fillers[i]+1)
				require.Len(t, got, fillers[i]+1, "nothing of the timed-out messages was queued")
				for _, n := range got[:fillers[i]] {
					require.Equal(t, "filler", n.From)
				}
				require.Equal(t, sdk.Notification{From: "s", Message: []byte("next")}, got[fillers[i]])
			}
		})
	}
}
