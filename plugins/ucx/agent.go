package ucx

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// agent is the state of one open agent. It is owned by one goroutine, the
// worker loop, locked to one OS thread: every UCX call happens there,
// because the UCP worker is created UCS_THREAD_MODE_SINGLE. Transport calls
// reach it only through the command queue.
type agent struct {
	name string
	cfg  config
	nw   *nativeWorker
	self procID // this process, carried in metadata

	nextID  uint64
	regions map[sdk.RegionID]*region
	peers   map[sdk.PeerID]*peer
	dlists  map[sdk.DlistID]*dlist
	handles map[sdk.HandleID]*handle
	sends   map[uint64]*notifSend // notification sends UCX still runs
	closing []*closeReq           // endpoint closes UCX still runs

	inflight int // handle ops UCX still runs (sends are in a.sends)
	events   []sdk.Event
	inbox    []sdk.Notification

	unflushed map[*peer][]*cOp // WRITE ops of the current Post call, per peer
	scratch   postScratch
	segs      []segment
	doneOps   []*cOp
	failSeen  uint64
	lastWatch time.Time
	exit      func(code int) // ends the process when a watched peer dies
	stop      bool           // set by Close: the loop ends after this command
}

// newID returns the next id; ids are never reused within a process since
// the counter lives as long as the agent and agents never share one.
func (a *agent) newID() uint64 {
	a.nextID++
	return a.nextID
}

// Bounds of the loop's waiting.
const (
	// spinIdle is how long the loop keeps spinning after the last sign of
	// activity before it sleeps: incoming transfers over tcp need this
	// side's progress too, and the next batch usually comes soon.
	spinIdle = 5 * time.Millisecond
	// idleWait is the longest the loop sleeps between progress rounds
	// when nothing is in flight.
	idleWait = 500 * time.Microsecond
	// spinSlice bounds one spin in C, so that the loop looks at the
	// clock (idle, peer watch) now and then; commands and completions end
	// a spin at once.
	spinSlice = 100 * time.Microsecond
	// crowdedSlice bounds one spin when spinning loops may hold every
	// processor; the loop yields after each.
	crowdedSlice = 10 * time.Microsecond
	// watchEvery is how often the loop checks that watched peer processes
	// still live.
	watchEvery = 20 * time.Millisecond
)

// loop runs the agent: it creates the UCP context and worker, then
// alternates between commands and progress until Close stops it. It never
// blocks in UCX: each progress call returns at once.
func (t *Transport) loop(cfg config, name string, opened chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(t.exited)

	keys, vals := cfg.settings()
	nw, err := openNative(keys, vals, cfg.errPeer)
	if err != nil {
		opened <- err
		return
	}
	self, err := selfProc()
	if err != nil {
		nw.close()
		opened <- sdk.Errorf(sdk.CodeBackend, "ucx: Open %q: reading this process's start time: %v", name, err)
		return
	}
	a := &agent{
		name: name, cfg: cfg, nw: nw, self: self,
		nextID:    t.idBase,
		regions:   map[sdk.RegionID]*region{},
		peers:     map[sdk.PeerID]*peer{},
		dlists:    map[sdk.DlistID]*dlist{},
		handles:   map[sdk.HandleID]*handle{},
		sends:     map[uint64]*notifSend{},
		unflushed: map[*peer][]*cOp{},
		exit:      t.exit,
	}
	opened <- nil

	loopsRunning.Add(1)
	defer loopsRunning.Add(-1)
	procs := int32(runtime.GOMAXPROCS(0)) // read once: it takes the scheduler's lock
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	active := time.Now()
	for {
		t.wake.Store(0) // before draining: a later command sets it again
		select {
		case cmd := <-t.cmds:
			cmd(a)
			if a.stop {
				a.shutdown()
				return
			}
			active = time.Time{}
			continue
		default:
		}
		// Spin in C: one cgo call per completion, command or slice rather
		// than one per progress round.
		slice := spinSlice
		crowded := loopsRunning.Load() >= procs
		if crowded {
			slice = crowdedSlice
		}
		n := a.nw.spin(&t.wake, slice)
		if crowded {
			// Every processor may be held by a spinning loop (several
			// agents in one process): let the goroutines that serve calls,
			// and the other agents, run. Yielding a goroutine locked to
			// its thread costs two context switches, so a loop with a
			// processor to spare never does.
			runtime.Gosched()
		}
		if a.reap() || n > 0 || a.inflight > 0 || len(a.sends) > 0 || len(a.closing) > 0 {
			active = time.Time{}
		}
		now := time.Now()
		if a.cfg.watchPeers {
			a.watch(now)
		}
		if active.IsZero() {
			active = now
		}
		if now.Sub(active) < spinIdle {
			continue
		}
		timer.Reset(idleWait)
		select {
		case cmd := <-t.cmds:
			cmd(a)
			if a.stop {
				a.shutdown()
				return
			}
			active = time.Time{}
		case <-timer.C:
		}
	}
}

// loopsRunning counts the worker loops of this process, each of which
// may hold a processor while it spins.
var loopsRunning atomic.Int32

// reap takes what UCX completed: finished ops, received notifications,
// failed endpoints and finished closes. It reports whether anything did.
func (a *agent) reap() bool {
	any := false
	a.doneOps = a.nw.takeDone(a.doneOps[:0])
	for _, op := range a.doneOps {
		any = true
		a.opDone(op)
	}
	for a.nw.hasMsg() {
		from, msg, ok := a.nw.takeMsg()
		if !ok {
			break
		}
		any = true
		a.inbox = append(a.inbox, sdk.Notification{From: from, Message: msg})
	}
	if f := a.nw.peerFailures(); f != a.failSeen {
		a.failSeen = f
		any = true
		for _, p := range a.peers {
			p.noteFailure()
		}
	}
	kept := a.closing[:0]
	for _, c := range a.closing {
		if !c.done() {
			kept = append(kept, c)
		}
	}
	a.closing = kept
	return any
}

// opDone routes a finished op to its handle or notification send.
func (a *agent) opDone(op *cOp) {
	id := opID(op)
	if h, ok := a.handles[sdk.HandleID(id)]; ok && h.op == op {
		a.inflight--
		h.opDone(a)
		return
	}
	if s, ok := a.sends[id]; ok {
		delete(a.sends, id)
		s.peer.sends--
		opFree(op)
		return
	}
	// An op whose handle is gone cannot happen: Release refuses running
	// handles. Free it rather than leak.
	opFree(op)
}

// watch checks, every watchEvery, that the processes of watched peers
// still live (UCX reports nothing in UCP_ERR_HANDLING_MODE_NONE).
func (a *agent) watch(now time.Time) {
	if now.Sub(a.lastWatch) < watchEvery || len(a.peers) == 0 {
		return
	}
	a.lastWatch = now
	for _, p := range a.peers {
		if p.lost == nil && !p.proc.alive() {
			a.peerDied(p)
		}
	}
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
	a.exit(exitPeerLost)
}

// exitPeerLost is the process's exit status after peerDied.
const exitPeerLost = 4

// held counts what the agent still holds, as Resources reports it.
func (a *agent) held() sdk.Resources {
	return sdk.Resources{
		Regions: uint64(len(a.regions)),
		Peers:   uint64(len(a.peers) + len(a.closing)),
		Dlists:  uint64(len(a.dlists)),
		Handles: uint64(len(a.handles)),
		// Notification sends are not counted: they hold no handle, dlist or
		// region, finish on their own, and Close waits for them.
		InFlight: uint64(a.inflight),
	}
}

// awaitCloses progresses the worker until every endpoint close and
// notification send finished, for at most closeWait or until ctx ends.
func (a *agent) awaitCloses(ctx context.Context) {
	deadline := time.Now().Add(closeWait)
	for len(a.closing)+len(a.sends) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		a.nw.progress()
		a.reap()
	}
}

// shutdown frees the worker. Close has checked that nothing is held; a
// closing endpoint is waited for (bounded) before the worker goes.
func (a *agent) shutdown() {
	a.awaitCloses(context.Background())
	a.scratch.free()
	a.nw.close()
}

// closeWait bounds how long Close waits for endpoint closes to finish.
const closeWait = 5 * time.Second
