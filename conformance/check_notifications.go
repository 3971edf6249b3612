package conformance

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// notifCount is how many messages each sender sends in the notification
// check.
const notifCount = 300

// needsNotifications runs on transports that claim notifications.
func needsNotifications(d sdk.Description) string {
	if !d.Capabilities.Notifications {
		return "transport does not claim Notifications"
	}
	return movesData(d)
}

// Bounds of a notification wait: the suite measures how long one message
// takes to arrive and waits noteWaitFactor times that, within
// [noteWaitMin, noteWaitMax]: generous, but seconds, so a lost message is
// named soon rather than after the settle bound.
const (
	noteWaitFactor = 50
	noteWaitMin    = 2 * time.Second
	noteWaitMax    = 15 * time.Second
)

// noteBound returns how long the suite waits for a notification to
// arrive: measured once per check, by a message from a (through its peer
// for b) to b, which it drains; the settle bound until then.
func (e *env) noteBound(a *agent, peer sdk.PeerID, b *agent) time.Duration {
	e.t.Helper()
	if e.noteWait > 0 {
		return e.noteWait
	}
	msg := e.prefix + " latency probe"
	start := time.Now()
	a.send(peer, msg)
	e.noteWait = noteWaitMax // the probe's own bound
	b.drainUntil(fmt.Sprintf("the latency probe %q from %q", msg, a.name), hasMessage(msg))
	took := time.Since(start)
	e.noteTook = took
	e.noteWait = min(max(noteWaitFactor*took, noteWaitMin), noteWaitMax)
	e.t.Logf("a notification took %v to arrive: the suite waits %v for one", took.Round(time.Microsecond), e.noteWait)
	return e.noteWait
}

// drainUntil drains an agent's notifications until stop says it has what
// it waits for. It waits the bound noteBound measured (the settle bound
// if none was), then fails the check naming what did not arrive: missing
// describes it from what did (nil: what).
func (a *agent) drainUntil(what string, stop func([]sdk.Notification) bool) []sdk.Notification {
	a.t.Helper()
	return a.drainNaming(what, stop, nil)
}

func (a *agent) drainNaming(what string, stop func([]sdk.Notification) bool, missing func([]sdk.Notification) string) []sdk.Notification {
	a.t.Helper()
	var got []sdk.Notification
	bound := settleTimeout
	if a.e.noteWait > 0 {
		bound = a.e.noteWait
	}
	deadline := time.Now().Add(bound)
	var b backoff
	for !stop(got) {
		if time.Now().After(deadline) {
			lost := what
			if missing != nil {
				lost = missing(got)
			}
			a.t.Fatalf("agent %q: %s not received within %v (got %d messages; the latency probe took %v to arrive): a notification was lost", a.name, lost, bound, len(got), a.e.noteTook)
		}
		ctx, cancel := a.e.callCtx()
		ns, err := a.tr.Notifications(ctx, 0)
		cancel()
		if err != nil {
			a.t.Fatalf("Notifications(agent %q): %v", a.name, err)
		}
		got = append(got, ns...)
		if len(ns) == 0 {
			b.wait()
		}
	}
	return got
}

// send sends messages to a peer; every item must be accepted.
func (a *agent) send(peer sdk.PeerID, msgs ...string) {
	a.t.Helper()
	out := make([]sdk.OutboundNotification, len(msgs))
	for i, m := range msgs {
		out[i] = sdk.OutboundNotification{Peer: peer, Message: []byte(m)}
	}
	chunks(a.e, out, func(out []sdk.OutboundNotification) {
		ctx, cancel := a.e.callCtx()
		defer cancel()
		errs, err := a.tr.SendNotifications(ctx, out)
		a.itemErrs("SendNotifications", errs, err, len(out))
	})
}

// hasMessage reports whether ns holds message m.
func hasMessage(m string) func([]sdk.Notification) bool {
	return func(ns []sdk.Notification) bool {
		for _, n := range ns {
			if string(n.Message) == m {
				return true
			}
		}
		return false
	}
}

// checkNotificationsOnce: every message arrives once, in order per sender.
var checkNotificationsOnce = check{
	name:  "notifications/exactly-once-in-order",
	doc:   "300 messages from each of two senders, sent in batches, arrive exactly once each, in order per sender, named by their sender; Notifications(max) returns at most max",
	needs: needsNotifications,
	run: func(e *env) {
		rx := e.agent()
		senders := []*agent{rx}
		if e.desc.Capabilities.Remote {
			senders = []*agent{e.agent(), e.agent()}
		}
		_ = rx.region(4096)
		peers := make([]sdk.PeerID, len(senders))
		for i, s := range senders {
			peers[i] = s.loadPeer(rx)
		}
		e.noteBound(senders[0], peers[0], rx)
		for k := 0; k < notifCount; k += 50 {
			for i, s := range senders {
				msgs := make([]string, 50)
				for j := range msgs {
					msgs[j] = fmt.Sprintf("%d:%d", i, k+j)
				}
				s.send(peers[i], msgs...)
			}
		}
		ctx, cancel := e.callCtx()
		one, err := rx.tr.Notifications(ctx, 1)
		cancel()
		if err != nil {
			e.t.Fatalf("Notifications(max 1): %v", err)
		}
		if len(one) > 1 {
			e.t.Errorf("Notifications(max 1) returned %d messages", len(one))
		}
		total := notifCount * len(senders)
		// lost names the messages that did not arrive, by sender and
		// payload.
		lost := func(ns []sdk.Notification) string {
			seen := map[string]bool{}
			for _, n := range append(one, ns...) {
				seen[n.From+"\x00"+string(n.Message)] = true
			}
			var out []string
			count := 0
			for i, s := range senders {
				for k := range notifCount {
					if m := fmt.Sprintf("%d:%d", i, k); !seen[s.name+"\x00"+m] {
						count++
						if len(out) < 5 {
							out = append(out, fmt.Sprintf("%q from %q", m, s.name))
						}
					}
				}
			}
			return fmt.Sprintf("%d of %d messages (lost: %s)", count, total, strings.Join(out, ", "))
		}
		got := append(one, rx.drainNaming(fmt.Sprintf("%d messages", total), func(ns []sdk.Notification) bool { return len(ns)+len(one) >= total }, lost)...)
		// A last message from each sender: once it arrived, any duplicate
		// sent before it would have arrived too.
		for i, s := range senders {
			s.send(peers[i], fmt.Sprintf("%d:end", i))
		}
		got = append(got, rx.drainUntil("the end messages", func(ns []sdk.Notification) bool {
			ends := 0
			for _, n := range ns {
				if strings.HasSuffix(string(n.Message), ":end") {
					ends++
				}
			}
			return ends >= len(senders)
		})...)
		next := make([]int, len(senders))
		for k, n := range got {
			sender, seq, _ := strings.Cut(string(n.Message), ":")
			i, err := strconv.Atoi(sender)
			if err != nil || i >= len(senders) {
				e.t.Fatalf("received a message nobody sent: %q from %q", n.Message, n.From)
			}
			if n.From != senders[i].name {
				e.t.Errorf("message %q says it is from %q, but %q sent it", n.Message, n.From, senders[i].name)
			}
			want := strconv.Itoa(next[i])
			if next[i] == notifCount {
				want = "end"
			}
			if seq != want {
				e.t.Fatalf("from %q: got message %s, want %s (received message %d of %d, %d of them from Notifications(max 1)): messages must arrive exactly once and in order per sender",
					senders[i].name, seq, want, k+1, len(got), len(one))
			}
			next[i]++
		}
	},
}

// noteSlot is the bytes of each WRITE of the with-post check: more than
// one 64 KiB chunk of the fake.
const noteSlot = 64<<10 + 5

// checkNotificationWithPost: a post's notification arrives once, after its
// bytes landed.
var checkNotificationWithPost = check{
	name: "notifications/with-post",
	doc: "the notification a WRITE carries arrives exactly once, and by then the written bytes are in place at the receiver (read the moment it is drained): " +
		"one WRITE of 64 MiB, then --repeat (default 100) WRITEs of 64 KiB and 5 bytes posted at once, each into a slot of its own; " +
		"a transport notifying early one time in ten passes with probability 0.9^repeat",
	needs: needsNotifications,
	run: func(e *env) {
		l := e.link(bigTransfer)
		want := pattern(8, bigTransfer)
		l.src.write(0, want)
		const msg = "blocks written"
		p := l.spec(sdk.OpWrite)
		p.Notification = []byte(msg)
		h := l.a.post(p)[0]
		// Within the settle bound: it comes once the 64 MiB landed.
		got := l.b.drainUntil("the post's notification", hasMessage(msg))
		expectBytes(l.dst, 0, want, "when the post's notification arrived")
		if st := l.a.wait(h)[0]; st.State != sdk.StateDone {
			e.t.Errorf("handle %d ended %v (%v), want DONE", h, st.State, st.Reason)
		}
		l.a.release(h)
		e.noteBound(l.a, l.peer, l.b)

		// Many small WRITEs at once, each checked the moment its
		// notification is drained.
		n := e.cfg.Repeat
		var specs []sdk.DlistSpec
		wants := make([][]byte, n)
		for i := range uint64(n) {
			wants[i] = pattern(1000+i, noteSlot)
			l.src.write(i*noteSlot, wants[i])
			specs = append(specs, sdk.DlistSpec{Descriptors: []sdk.Descriptor{l.src.desc(i*noteSlot, noteSlot)}},
				sdk.DlistSpec{Peer: l.peer, Descriptors: []sdk.Descriptor{l.dst.desc(i*noteSlot, noteSlot)}})
		}
		dls := l.a.dlists(specs...)
		posts := make([]sdk.PostSpec, n)
		index := map[string]int{}
		for i := range n {
			m := fmt.Sprintf("%s post %d", e.prefix, i)
			index[m] = i
			posts[i] = sdk.PostSpec{Op: sdk.OpWrite, Local: dls[2*i], LocalIndices: []uint32{0}, Remote: dls[2*i+1], RemoteIndices: []uint32{0}, Notification: []byte(m)}
		}
		ids := l.a.post(posts...)
		seen := map[int]int{}
		checked := 0
		lost := func([]sdk.Notification) string {
			var out []string
			for m, i := range index {
				if seen[i] == 0 && len(out) < 5 {
					out = append(out, fmt.Sprintf("%q from %q", m, l.a.name))
				}
			}
			return fmt.Sprintf("%d of %d post notifications (lost: %s)", n-len(seen), n, strings.Join(out, ", "))
		}
		got = append(got, l.b.drainNaming("the posts' notifications", func(ns []sdk.Notification) bool {
			for _, x := range ns[checked:] {
				if i, ok := index[string(x.Message)]; ok {
					seen[i]++
					if seen[i] == 1 && !expectBytes(l.dst, uint64(i)*noteSlot, wants[i], fmt.Sprintf("WRITE %d (handle %d), the moment its notification was drained", i, ids[i])) {
						e.t.Fatalf("the notification of handle %d arrived before its bytes landed: a post's notification is delivered only once it is DONE", ids[i])
					}
				}
			}
			checked = len(ns)
			return len(seen) == n
		}, lost)...)
		for i, st := range l.a.wait(ids...) {
			if st.State != sdk.StateDone {
				e.t.Errorf("handle %d ended %v (%v), want DONE", ids[i], st.State, st.Reason)
			}
		}
		l.a.send(l.peer, "end")
		got = append(got, l.b.drainUntil("the end message", hasMessage("end"))...)
		count, times := 0, map[int]int{}
		for _, x := range got {
			if i, ok := index[string(x.Message)]; ok {
				times[i]++
			}
			if string(x.Message) == msg {
				count++
				if x.From != l.a.name {
					e.t.Errorf("the post's notification says it is from %q, want %q", x.From, l.a.name)
				}
			}
			if i, ok := index[string(x.Message)]; ok && x.From != l.a.name {
				e.t.Errorf("the notification of WRITE %d says it is from %q, want %q", i, x.From, l.a.name)
			}
		}
		if count != 1 {
			e.t.Errorf("the post's notification arrived %d times, want once", count)
		}
		for i, c := range times {
			if c != 1 {
				e.t.Errorf("the notification of handle %d arrived %d times, want once", ids[i], c)
			}
		}
	},
}

// checkNotificationNotOnFailure: a post that does not end DONE never
// delivers its notification.
var checkNotificationNotOnFailure = check{
	name: "notifications/never-unless-done",
	doc: "the notification of a WRITE canceled while running, which ends CANCELED or FAILED, is never delivered: none has arrived after a barrier and a later message " +
		"from the same sender; exercised on --repeat (default 100) such WRITEs, 4 at a time, sized from the measured bandwidth (a WRITE that ended DONE anyway delivers its notification, and does not count); " +
		"a transport delivering one in ten passes with probability 0.9^repeat",
	needs: func(d sdk.Description) string {
		if !d.Capabilities.Cancel {
			return "transport does not claim Cancel, the suite's way to make a post end other than DONE"
		}
		return needsNotifications(d)
	},
	run: func(e *env) {
		a, b := e.pair()
		var (
			mu      sync.Mutex
			stopped = map[string]string{} // message -> how its handle ended
		)
		e.grow(a, b, "WRITEs canceled before DONE", e.cfg.Repeat, func(f *flight) int {
			e.noteBound(a, f.peer, b)
			var ended atomic.Int64
			e.parallelOn(flightWorkers, e.cfg.Repeat, func(t T, w, i int) {
				a := a.as(t)
				msg := fmt.Sprintf("canceled post %d of %d bytes", i, f.n)
				p := f.spec(w)
				p.Notification = []byte(msg)
				h := a.post(p)[0]
				cancelAll(e, a, []sdk.HandleID{h})
				st := a.wait(h)[0]
				a.release(h)
				if st.State == sdk.StateDone {
					return // its notification is due
				}
				ended.Add(1)
				mu.Lock()
				stopped[msg] = fmt.Sprintf("handle %d ended %v (%v)", h, st.State, st.Reason)
				mu.Unlock()
			})
			return int(ended.Load())
		})
		if e.t.Failed() {
			return
		}
		// Whatever was still on its way has landed once a barrier transfer
		// and a later message from the same sender arrived.
		l := e.linkBetween(a, b, 4096)
		barrier(e, l)
		end := e.prefix + " after the canceled posts"
		a.send(l.peer, end)
		got := b.drainUntil("the message sent after the canceled posts", hasMessage(end))
		delivered := 0
		for _, n := range got {
			if how, ok := stopped[string(n.Message)]; ok {
				delivered++
				if delivered <= 3 {
					e.t.Errorf("%s, yet its notification %q was delivered: a post's notification is delivered only once it is DONE, never if it is not", how, n.Message)
				}
			}
		}
		if delivered > 0 {
			e.t.Errorf("%d of %d notifications of posts that did not end DONE were delivered", delivered, len(stopped))
		}
		e.t.Logf("%d WRITEs ended without DONE; none of their notifications arrived", len(stopped))
	},
}
