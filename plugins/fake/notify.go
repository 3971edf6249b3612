package fake

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// pid is this process's id, as metadata reports it.
var pid = os.Getpid()

// socketSeq numbers this process's notification sockets.
var socketSeq atomic.Uint64

// sendTimeout bounds how long a notification waits for room in the peer's
// socket buffer.
const sendTimeout = time.Second

// sendRetry bounds one try of a send within sendTimeout. The poller wakes a
// sender blocked on a full datagram queue only when one of its own
// datagrams leaves that queue, so a sender whose queue space was taken by
// other senders would sleep out the whole sendTimeout while the receiver
// drains: it tries again every sendRetry instead. A try that timed out
// queued nothing (sendto queues a datagram whole or fails with EAGAIN), so
// trying again never delivers a message twice.
const sendRetry = 2 * time.Millisecond

// note is a notification on its way to a peer's socket.
type note struct {
	to  *net.UnixAddr
	msg []byte
}

// delayedNote is a note held back by a notif-delay fault until due.
type delayedNote struct {
	note
	due time.Time
}

// listenNotifications binds the agent's notification socket: a unix
// datagram socket in the abstract namespace, so it needs no file, cannot
// outlive the process and reaches agents in other processes on the host.
// Datagrams on a unix socket are reliable and ordered, which gives delivery
// once and in order per sender.
//
// The name is unique over time, not only among live sockets: besides the
// pid and a sequence number it carries 64 random bits. Pids are reused, so
// a name made of pid and sequence alone would let a later process bind the
// name of a dead agent, and a peer still holding the dead agent's metadata
// would deliver to the newcomer messages meant for the dead one (in the
// conformance suite, a sender of an earlier run's "0:0" seen again by a
// later receiver). With the nonce such sends fail REMOTE_DISCONNECT.
func listenNotifications(agent string) (*net.UnixConn, string, error) {
	name := fmt.Sprintf("@custody-fake/%d/%d/%016x", pid, socketSeq.Add(1), mrand.Uint64())
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return nil, "", err
	}
	return conn, name, nil
}

// receive reads notifications into the inbox until the socket closes;
// each one delivered wakes Wake's channel.
func (t *Transport) receive(conn *net.UnixConn) {
	defer t.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, _, err := conn.ReadFromUnix(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		from, msg, ok := decodeNote(buf[:n])
		if !ok {
			continue
		}
		t.mu.Lock()
		if !t.crashed && t.book.Deliver(from, msg) {
			t.signalFor(false, true)
		}
		t.mu.Unlock()
	}
}

// encode builds the datagram of a notification: the length of this agent's
// name, the name, then the message.
func (t *Transport) encode(msg []byte) []byte {
	b := make([]byte, 2, 2+len(t.agent)+len(msg))
	binary.BigEndian.PutUint16(b, uint16(len(t.agent)))
	return append(append(b, t.agent...), msg...)
}

// errSendDeadline is the error of a send that the caller's context ended
// before it found room; nothing was queued.
var errSendDeadline = errors.New("the call's deadline passed (or its context ended) before the peer's queue had room; nothing queued")

// send writes one notification to its peer's socket, signed with this
// agent's name, waiting for room in the peer's queue at most sendTimeout
// and never past ctx's deadline. It fails with errSendDeadline when ctx
// ended first, with the write's error (os.ErrDeadlineExceeded when
// sendTimeout ran out) otherwise; a failed send queued nothing.
func (t *Transport) send(ctx context.Context, n note) error {
	if ctx.Err() != nil {
		return errSendDeadline
	}
	b := t.encode(n.msg)
	if t.sendFault != nil {
		if err := t.sendFault(n.msg); err != nil {
			return err
		}
	}
	end := time.Now().Add(sendTimeout)
	byCtx := false
	if d, ok := ctx.Deadline(); ok && d.Before(end) {
		end, byCtx = d, true
	}
	for {
		try := time.Now().Add(sendRetry)
		if try.After(end) {
			try = end
		}
		// Concurrent senders share the socket and its deadline; each sets
		// its own before each try, so a try is at most a little shorter.
		_ = t.conn.SetWriteDeadline(try)
		_, err := t.conn.WriteToUnix(b, n.to)
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		if ctx.Err() != nil || !time.Now().Before(end) {
			if byCtx || ctx.Err() != nil {
				return errSendDeadline
			}
			return err
		}
		if t.sendRetryHook != nil {
			t.sendRetryHook()
		}
	}
}

// decodeNote splits a datagram into sender name and message.
func decodeNote(b []byte) (from string, msg []byte, ok bool) {
	if len(b) < 2 {
		return "", nil, false
	}
	k := int(binary.BigEndian.Uint16(b))
	if len(b) < 2+k {
		return "", nil, false
	}
	return string(b[2 : 2+k]), append([]byte(nil), b[2+k:]...), true
}

// dueNotes pops the delayed notifications that fell due and says how long
// until the next one does (zero for none).
func (t *Transport) dueNotes(now time.Time) (due []note, wait time.Duration) {
	kept := t.delayed[:0]
	for _, d := range t.delayed {
		if now.Before(d.due) {
			kept = append(kept, d)
			wait = shorter(wait, d.due.Sub(now))
			continue
		}
		due = append(due, d.note)
	}
	t.delayed = kept
	return due, wait
}

// SendNotifications sends each message to a loaded peer. An unknown peer or
// a message over Limits.MaxNotificationBytes is INVALID_ARGUMENT; a peer
// whose socket is gone is REMOTE_DISCONNECT; one whose queue stayed full
// for sendTimeout is BACKEND; a message the call's context ended before
// (its deadline passed, or it was canceled, while waiting for room or
// before its turn) is TIMEOUT: nothing of it was queued, and the call never
// waits past the deadline. Once a message to a peer failed, the call's
// later messages to that peer are not sent (BACKEND, or TIMEOUT once the
// context ended), so that a caller who sends the failed ones again, in
// order, keeps them in order. A message to a peer that has a post's
// notification still waiting in the outbox (its queue was full) goes
// behind it there and is OK: queued for delivery, in order. A notif-drop
// fault drops the message silently, a notif-delay fault delivers it late.
func (t *Transport) SendNotifications(ctx context.Context, msgs []sdk.OutboundNotification) ([]error, error) {
	if err := t.lock(ctx, ""); err != nil {
		return nil, err
	}
	out := make([]error, len(msgs))
	sends := make([]note, len(msgs))
	for i, m := range msgs {
		kp, err := t.book.CheckSend(m)
		if err != nil {
			out[i] = err
			continue
		}
		p := kp.Value
		switch {
		case t.fault(faultNotifDrop, 0, p.name, -1) != nil || t.misbehaves(misbehaveDropNote):
		default:
			n := note{to: p.notify, msg: append([]byte(nil), m.Message...)}
			if r := t.fault(faultNotifDelay, 0, p.name, -1); r != nil {
				t.delayed = append(t.delayed, delayedNote{note: n, due: time.Now().Add(r.dur)})
				t.kick()
				continue
			}
			if t.queuedFor(n.to) {
				t.outbox = append(t.outbox, n)
				t.kick()
				continue
			}
			sends[i] = n
		}
	}
	t.mu.Unlock()
	failed := map[string]int{} // peer socket -> the item that failed first
	for i, n := range sends {
		if n.to == nil {
			continue
		}
		if err := ctx.Err(); err != nil {
			out[i] = sdk.Errorf(sdk.CodeTimeout, "fake: notification to %s not sent: the call's context ended (%v) before its turn; nothing queued, send it again", n.to.Name, err)
			continue
		}
		if first, ok := failed[n.to.Name]; ok {
			// Same code as the first failure: a later message is refused for
			// the same reason (a full queue past the deadline is TIMEOUT).
			out[i] = sdk.Errorf(sdk.CodeOf(out[first]), "fake: notification to %s not sent: message %d of this call to that peer failed first; send from that one again, in order", n.to.Name, first)
			continue
		}
		if err := t.send(ctx, n); err != nil {
			out[i] = sendError(n, err)
			failed[n.to.Name] = i
		}
	}
	return out, nil
}

// sendError classifies a failed send.
func sendError(n note, err error) error {
	switch {
	case peerSocketGone(err):
		return sdk.Errorf(sdk.CodeRemoteDisconnect, "fake: notification to %s: peer's socket is gone: %v", n.to.Name, err)
	case errors.Is(err, errSendDeadline):
		return sdk.Errorf(sdk.CodeTimeout, "fake: notification to %s: %v; send it again", n.to.Name, err)
	}
	return sdk.Errorf(sdk.CodeBackend, "fake: notification to %s: %v; retry", n.to.Name, err)
}

// Notifications drains up to max received messages (all when max <= 0),
// each once, in order per sender. It never waits.
func (t *Transport) Notifications(ctx context.Context, max int) ([]sdk.Notification, error) {
	if err := t.lock(ctx, ""); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	return t.book.Notifications(max), nil
}
