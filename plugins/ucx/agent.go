package ucx

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/kit"
)

// agent is the native state of one open agent. Transport calls run on
// their callers' goroutines and hold the Transport's lock for the whole
// call; UCX itself is driven by the shim's progress thread, which never
// touches this state. What the progress thread finished reaches it
// through the shim's completion queue (reap).
type agent struct {
	t     *Transport
	book  *book // t.book
	name  string
	cname cChars // name, in C memory: notifications carry it
	cfg   config
	nw    *nativeWorker
	self  kit.Proc // this process, carried in metadata

	sends   map[uint64]*notifSend // notification sends UCX still runs
	closing []*closeReq           // endpoint closes UCX still runs

	batch  subBatch      // the submissions of one Post call
	segs   []segment     // one post's segments while they are checked
	pend   []pendingPost // one Post call's handles, until submitted
	issued []bool
	done   doneBuf
	comps  []completion

	doneSeen uint64 // the shim's done_seq at the last reap
	msgSeen  uint64 // its msg_seq
	lostSeen uint64 // its msg_lost, as Notifications last reported it
	failSeen uint64 // its peer_failures

	watches []*kit.ProcWatch // of unloaded peers, until their goroutines ended
	wake    *wakeWatch       // forwards the shim's wake-ups to the transport's Wake channel

	// progMu guards the worker against being freed under a caller that
	// progresses it outside the Transport's lock (callerProgress); freed
	// is set, under it, once shutdown freed the worker.
	progMu sync.RWMutex
	freed  bool
	// progressHook, when set (tests), runs in place of the shim's
	// progress on a caller's thread.
	progressHook func()
}

// Bounds of the progress thread's waiting and of the peer watch.
const (
	// spinIdle is how long the progress thread keeps spinning after the
	// last sign of activity before it sleeps on the worker's event fd:
	// the next transfer usually comes soon, and a sleeping thread takes
	// a wake-up (tens of µs) to answer.
	spinIdle = 2 * time.Millisecond
)

// sleepMax bounds one sleep of the progress thread: a safety net should
// an event not wake it, at the cost of one wake-up per period. Tests
// raise it so that a missed wake-up shows as a hang.
var sleepMax = 100 * time.Millisecond

// openAgent creates the native worker (and its progress thread) and the
// agent around it.
func openAgent(cfg config, name string, t *Transport) (*agent, error) {
	keys, vals := cfg.settings()
	nw, err := openNative(keys, vals, cfg.errPeer, spinIdle, sleepMax)
	if err != nil {
		return nil, err
	}
	self, err := kit.SelfProc()
	if err != nil {
		nw.close()
		return nil, sdk.Errorf(sdk.CodeBackend, "ucx: Open %q: reading this process's start time: %v", name, err)
	}
	wake, err := startWakeWatch(nw, t.wake)
	if err != nil {
		nw.close()
		return nil, sdk.Errorf(sdk.CodeBackend, "ucx: Open %q: watching the worker's wake eventfd: %v", name, err)
	}
	a := &agent{
		t: t, book: t.book, name: name, cname: cString(name), cfg: cfg, nw: nw, self: self,
		sends: map[uint64]*notifSend{},
		wake:  wake,
	}
	return a, nil
}

// reap takes what the progress thread finished: completed ops, received
// notifications, failed endpoints and finished closes. Each is one atomic
// load when nothing happened.
func (a *agent) reap() {
	if s := a.nw.doneSeq(); s != a.doneSeen {
		a.doneSeen = s
		a.comps = a.nw.takeDone(&a.done, a.comps[:0])
		for _, c := range a.comps {
			a.opDone(c)
		}
	}
	if s := a.nw.msgSeq(); s != a.msgSeen {
		a.msgSeen = s
		for {
			from, msg, ok := a.nw.takeMsg()
			if !ok {
				break
			}
			a.book.Deliver(from, msg)
		}
	}
	if f := a.nw.peerFailures(); f != a.failSeen {
		a.failSeen = f
		for _, p := range a.book.Peers() {
			p.Value.noteFailure()
		}
	}
	if len(a.closing) > 0 {
		kept := a.closing[:0]
		for _, c := range a.closing {
			if !c.done() {
				kept = append(kept, c)
			}
		}
		a.closing = kept
	}
}

// opDone routes a finished op to its handle or notification send.
func (a *agent) opDone(c completion) {
	if h := a.book.Find(sdk.HandleID(c.id)); h != nil {
		if st, _ := h.State(); !st.Terminal() {
			p := h.Remote.Peer.Value
			p.inflight--
			st, reason := p.outcome(h.ID, c)
			a.book.Complete(h, st, reason)
		}
		return
	}
	if s, ok := a.sends[c.id]; ok {
		delete(a.sends, c.id)
		s.peer.sends--
	}
	// Nothing else can finish: Release refuses running handles.
}

// onPeerExit runs when a watched peer's process exited.
func (t *Transport) onPeerExit(p *peer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.book.Opened() || p.id == 0 || p.unloaded || p.lost != nil {
		return // never loaded, unloaded (or closed) meanwhile
	}
	t.agent.Load().peerDied(p)
}

// peerDied handles a watched peer whose process is gone while loaded. UCX
// in UCP_ERR_HANDLING_MODE_NONE never completes requests to a dead peer
// and refuses to force-close the endpoint, so requests in flight to it
// could never be finished or safely freed, and a post racing with the
// death would hang the same way: the process exits, which the host treats
// as a fence (PeerLossProcessExits). It exits whether or not anything is in
// flight, so that the promise holds without a race.
func (a *agent) peerDied(p *peer) {
	p.lost = sdk.Errorf(sdk.CodeRemoteDisconnect, "ucx: peer %d (%s, pid %d) exited; unload it and load its new metadata", p.id, p.name, p.proc.Pid)
	fmt.Fprintf(os.Stderr, "custody-transport-ucx: agent %q: loaded peer %q (pid %d) died with %d operations in flight over %s; UCX reports no peer failure in this mode, exiting so the host fences this transport\n",
		a.name, p.name, p.proc.Pid, p.inflight, a.cfg.tls)
	a.t.wake.signal() // the peer's calls now fail; where exit returns (tests), say so
	a.t.exit(exitPeerLost)
}

// exitPeerLost is the process's exit status after peerDied.
const exitPeerLost = 4

// awaitCloses waits until every endpoint close and notification send
// finished, for at most closeWait or until ctx ends. The progress thread
// moves them; this only looks.
func (a *agent) awaitCloses(ctx context.Context) {
	deadline := time.Now().Add(closeWait)
	for {
		a.reap()
		if len(a.closing)+len(a.sends) == 0 || !time.Now().Before(deadline) || ctx.Err() != nil {
			return
		}
		time.Sleep(closePoll)
	}
}

// shutdown waits for the peer watches to end and frees the worker. Close
// has checked that nothing is held (every peer unloaded, so every watch
// stopped), and closed the Book, so no call touches the worker or the
// watches any more. It must be called without mu held: a watch that fires
// takes it.
func (a *agent) shutdown(mu *sync.Mutex) {
	for _, w := range a.watches {
		w.Wait()
	}
	a.wake.stop() // before the worker is freed: it reads the shim's counters
	mu.Lock()
	defer mu.Unlock()
	a.progMu.Lock()
	a.freed = true
	a.progMu.Unlock()
	a.nw.close()
	a.batch.free()
	a.done.free()
	freeCString(a.cname)
}

// closeWait bounds how long Close waits for endpoint closes to finish;
// closePoll is how often it looks.
const (
	closeWait = 5 * time.Second
	closePoll = 50 * time.Microsecond
)
