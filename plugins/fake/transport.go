package fake

import (
	"context"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/kit"
)

// Version is the fake transport's version, as Describe reports it.
const Version = "1.0.0"

// Limits the fake enforces, as Describe reports them.
const (
	maxDescriptorsPerList = 1 << 16
	maxDescriptorsPerPost = 1 << 16
	maxNotificationBytes  = 4096
	maxMetadataBytes      = 1 << 20
	peerLossBoundMillis   = 1000
	cancelBoundMillis     = 1000
)

// Transport is one fake agent. The zero value is not usable; call New. It
// implements sdk.Transport, sdk.EventSource and sdk.Waker, and is safe for
// concurrent use.
type Transport struct {
	exitOnCrash bool
	// stepHook, when set (by tests, before Open), runs before each step of
	// the DMA engine, so a test can hold the engine between two chunks.
	stepHook func()
	// watch is how often, under fence=initiated, the engine checks that
	// the peer of a running transfer is alive (peerWatch unless a test set
	// it before Open).
	watch time.Duration
	// sendRetryHook, when set (by tests, before Open), runs after each try
	// of a notification send that timed out and will be tried again, and
	// after each outbox try that found the peer's queue full (on the
	// engine goroutine, with t.mu held).
	sendRetryHook func()
	// moveHook, when set (by tests, before Open), runs on the engine
	// goroutine after a chunk passed its checks and before its bytes move,
	// without the agent's lock: the window a peer's death could fall in.
	moveHook func()
	// sendFault, when set (by tests, before Open), runs before each
	// notification send; an error it returns is that send's, and nothing
	// is sent.
	sendFault func(msg []byte) error

	mu sync.Mutex
	// book keeps the contract's bookkeeping: the tables, pins, handle
	// states, events, inbox, and the gate of Open and Close.
	book    *book
	crashed bool // a crash fault or Kill ended the agent
	agent   string
	p       params
	rng     *rand.Rand

	active   []*transfer           // transfers the DMA engine still runs
	next     int                   // round-robin position in active
	maps     map[*mapping]struct{} // every live mapping, for teardown
	calls    map[string]int        // calls per crash point, for crash rules
	early    string                // the misbehave mode given at New (WithMisbehave)
	faultLog *os.File              // fault_log: where firings are appended
	freed    []sdk.HandleID        // released handle ids, for reuse-ids
	posts    int                   // transfers posted, for post= selectors
	loads    int                   // valid LoadPeers items, for load-peer-fail
	prepares int                   // valid remote dlists, for prepare-fail
	// users and ghosts serve misbehave=unpin-terminal: the unreleased
	// handles of each dlist, and the dlists reported released while
	// terminal handles still used them (the Book frees them once those
	// handles are released).
	users  map[sdk.DlistID]map[*handle]bool
	ghosts map[sdk.DlistID]bool

	delayed []delayedNote
	outbox  []note // notifications the engine still has to deliver, in order

	in     *incoming                // fence=incoming: peers' chunks, copied here (incoming.go)
	served map[sdk.RegionID]*region // registered regions by id, for in

	life *lease // held from Open until Close or death: peers watch it
	home *home  // the directory of the agent's lease files (home.go)
	conn *net.UnixConn
	addr string
	out  int // the engine's non-blocking sending socket (outbox.go)
	stop chan struct{}
	wake chan struct{} // kicks the DMA engine (kick)
	wg   sync.WaitGroup

	// woken is Wake's channel (waker.go): made by New, never closed.
	woken chan struct{}
	// wokeStates and wokeNotes are the reasons of what woken holds
	// (WakeReasons).
	wokeStates, wokeNotes atomic.Bool
}

var (
	_ sdk.Transport   = (*Transport)(nil)
	_ sdk.EventSource = (*Transport)(nil)
	_ sdk.Waker       = (*Transport)(nil)
)

// Option configures a Transport at New.
type Option func(*Transport)

// WithExitOnCrash makes a crash fault end the process with exit code 3, as
// the plugin binary must, instead of shutting the agent down in-process.
// The plugin main passes it: plugin.Serve(fake.New(fake.WithExitOnCrash())).
func WithExitOnCrash() Option {
	return func(t *Transport) { t.exitOnCrash = true }
}

// New returns an agent that is not open yet. Without options a crash fault
// shuts the agent down in-process (every later call answers
// PLUGIN_SHUTDOWN), which is what in-process tests want.
func New(opts ...Option) *Transport {
	t := &Transport{p: defaultParams(), watch: peerWatch, woken: make(chan struct{}, 1)}
	t.book = kit.NewBook[*region, *peer, struct{}, handleFaults]("fake", t.limits(t.p))
	for _, o := range opts {
		o(t)
	}
	return t
}

// Describe says who the fake is and what it promises. Before Open it
// reports the default parameters; FenceScope follows the fence parameter,
// CancelEffect and Capabilities.Cancel the cancel parameter.
func (t *Transport) Describe(ctx context.Context) (sdk.Description, error) {
	t.mu.Lock()
	p := t.p
	crashed := t.crashed
	t.mu.Unlock()
	if crashed {
		return sdk.Description{}, shutdownError()
	}
	fence := sdk.FenceInitiatedAndIncoming
	if p.fence == fenceInitiated && p.misbehave != misbehaveFenceLie {
		fence = sdk.FenceInitiated
	}
	cancel := sdk.CancelStops
	if p.cancel == cancelNone {
		cancel = sdk.CancelNone
	}
	lim := t.limits(p)
	if cancel == sdk.CancelStops {
		lim.CancelBoundMillis = cancelBound(p)
	}
	return sdk.Description{
		Name:          "fake",
		Version:       Version,
		ContractMajor: sdk.ContractMajor,
		ContractMinor: sdk.ContractMinor,
		MemoryKinds:   []sdk.MemoryKind{sdk.MemoryHost},
		Capabilities:  sdk.Capabilities{Remote: true, Local: true, Notifications: true, Cancel: cancel != sdk.CancelNone, Events: true},
		CancelEffect:  cancel,
		PeerLoss:      sdk.PeerLossReported,
		FenceScope:    fence,
		Limits:        lim,
	}, nil
}

// cancelBound is the CancelBoundMillis the fake states under
// cancel=stops: a canceled transfer stops before its next chunk, far
// sooner; the bound leaves room for a loaded machine.
func cancelBound(p params) uint32 {
	return cancelBoundMillis + uint32(p.chunkDelay.Milliseconds())
}

// limits are the Limits the fake states and its Book enforces.
func (t *Transport) limits(p params) sdk.Limits {
	return sdk.Limits{
		MaxDescriptorsPerList: maxDescriptorsPerList,
		MaxDescriptorsPerPost: maxDescriptorsPerPost,
		MaxNotificationBytes:  maxNotificationBytes,
		MaxMetadataBytes:      maxMetadataBytes,
		PeerLossBoundMillis:   peerLossBoundMillis + uint32(p.chunkDelay.Milliseconds()),
	}
}

// Open starts the agent: it parses the parameters, takes the agent's life
// lease, opens the notification socket and starts the DMA engine. It is
// refused unless the agent is new (PLUGIN_SHUTDOWN once killed), and that
// is checked before the request, so a killed agent answers PLUGIN_SHUTDOWN
// to any Open, a bad one included.
func (t *Transport) Open(ctx context.Context, req sdk.OpenRequest) error {
	if err := kit.ContextError(ctx, "fake"); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// The agent's state first: a crashed agent answers PLUGIN_SHUTDOWN
	// whatever the request, an opened one refuses any (the Book's gate).
	if t.crashed {
		return shutdownError()
	}
	if t.book.Opened() && t.p.misbehave == misbehaveOpenLax {
		return nil // misbehave=open-lax: a second Open is OK
	}
	if _, ok := req.Params["misbehave"]; !ok && t.early != "" {
		req.Params = maps.Clone(req.Params)
		if req.Params == nil {
			req.Params = map[string]string{}
		}
		req.Params["misbehave"] = t.early
	}
	return t.book.Open(req.Agent, func() error { return t.open(req) })
}

// open is Open's own work, once the Book's gate let it through. The
// Book's limits, set at New, differ from those after Open only in
// PeerLossBoundMillis, which the Book does not enforce.
func (t *Transport) open(req sdk.OpenRequest) error {
	p, err := parseParams(req.Params)
	if err != nil {
		return err
	}
	hm, err := makeHome(p.dir)
	if err != nil {
		return sdk.Errorf(sdk.CodeBackend, "fake: Open: lease directory in %s: %v; check dir=", p.dir, err)
	}
	life, err := acquireLease(hm.path)
	if err != nil {
		hm.remove()
		return sdk.Errorf(sdk.CodeBackend, "fake: Open: life lease in %s: %v; check dir=", p.dir, err)
	}
	conn, addr, err := listenNotifications(req.Agent)
	if err != nil {
		life.release()
		hm.remove()
		return sdk.Errorf(sdk.CodeBackend, "fake: Open: notification socket: %v", err)
	}
	out, err := openOutSocket()
	if err != nil {
		conn.Close()
		life.release()
		hm.remove()
		return sdk.Errorf(sdk.CodeBackend, "fake: Open: sending socket: %v", err)
	}
	if p.faultLog != "" {
		if t.faultLog, err = os.OpenFile(p.faultLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); err != nil {
			_ = syscall.Close(out)
			conn.Close()
			life.release()
			hm.remove()
			return sdk.Errorf(sdk.CodeBackend, "fake: Open: fault_log: %v; check the path", err)
		}
	}
	if p.fence == fenceIncoming {
		if t.in, err = listenIncoming(); err != nil {
			if t.faultLog != nil {
				t.faultLog.Close()
				t.faultLog = nil
			}
			_ = syscall.Close(out)
			conn.Close()
			life.release()
			hm.remove()
			return sdk.Errorf(sdk.CodeBackend, "fake: Open: incoming socket: %v", err)
		}
	}
	t.life, t.out, t.home = life, out, hm
	t.agent, t.p = req.Agent, p
	if p.misbehave == misbehaveReuseIDs {
		t.book.SetMisbehave(kit.Misbehave{HandleID: t.reusedID})
	}
	t.users, t.ghosts = map[sdk.DlistID]map[*handle]bool{}, map[sdk.DlistID]bool{}
	t.rng = rand.New(rand.NewPCG(p.seed, p.seed))
	t.maps = map[*mapping]struct{}{}
	t.served = map[sdk.RegionID]*region{}
	t.calls = map[string]int{}
	t.conn, t.addr = conn, addr
	t.stop = make(chan struct{})
	t.wake = make(chan struct{}, 1)
	t.wg.Add(2)
	go t.receive(conn)
	go t.engine()
	if t.in != nil {
		sameProcess.Store(t.in.addr, t)
		t.wg.Add(1)
		go t.accept(t.in)
	}
	return nil
}

// Close ends the agent. It is refused with BUSY while any region, peer,
// dlist or handle is held; transfers still running without a handle
// (misbehave=release-running) are stopped. Closing a closed agent is OK and
// changes nothing: the agent has ended and holds nothing, which is all
// that OK promises.
func (t *Transport) Close(ctx context.Context) error {
	if err := kit.ContextError(ctx, "fake"); err != nil {
		return err
	}
	t.mu.Lock()
	if t.crashed {
		t.mu.Unlock()
		return shutdownError()
	}
	if r := t.book.Resources(); t.book.Opened() && r.Regions == 0 && r.Handles == 0 && r.Peers+r.Dlists > 0 && t.misbehaves(misbehaveCloseLax) {
		t.mu.Unlock()
		return nil // misbehave=close-lax: OK, yet nothing closed
	}
	closed, err := t.book.Close(nil)
	t.mu.Unlock()
	if !closed {
		return err // refused, or closed before: OK without effect
	}
	t.teardown()
	return nil
}

// Kill ends the agent at once, as the death of its process would: it is
// the in-process crash of a crash fault, on demand. The DMA engine stops
// (every transfer this agent initiated stops before its next chunk), the
// mappings are unmapped and every lease dropped, so peers see the death
// (their transfers into this agent's regions end REMOTE_DISCONNECT, or
// under fence=initiated keep writing until their peer watch notices), and
// every later call, Open and Close included, answers PLUGIN_SHUTDOWN. It
// never exits the process, even under WithExitOnCrash; killing a killed
// agent does nothing. Tests use it to kill one in-process agent alone.
func (t *Transport) Kill() {
	t.mu.Lock()
	was := !t.crashed && t.book.Opened()
	t.crashed = true
	t.mu.Unlock()
	if was {
		t.teardown()
		t.signal()
	}
}

// Resources counts what the agent holds. A new or closed agent holds
// nothing.
func (t *Transport) Resources(ctx context.Context) (sdk.Resources, error) {
	if err := kit.ContextError(ctx, "fake"); err != nil {
		return sdk.Resources{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.crashed {
		return sdk.Resources{}, shutdownError()
	}
	// InFlight (sdk.Resources) counts the transfers whose bytes may still
	// move: those the engine runs. That is the Book's count (posted, end
	// not reported) but under misbehave=early-done, whose handles turn
	// DONE while their bytes still move.
	r := t.book.Resources()
	r.InFlight = uint64(len(t.active))
	r.Dlists -= uint64(len(t.ghosts))
	return r, nil
}

// lock takes t.mu for a call of an open agent, or returns the error the call
// answers. call names a crash point ("" for none): when a crash rule fires
// there, the agent crashes before the call takes effect.
func (t *Transport) lock(ctx context.Context, call string) error {
	if err := kit.ContextError(ctx, "fake"); err != nil {
		return err
	}
	t.mu.Lock()
	if t.crashed {
		t.mu.Unlock()
		return shutdownError()
	}
	if err := t.book.Check(); err != nil && !t.ungated(call) {
		t.mu.Unlock()
		return err
	}
	if call == "" || !t.crashDue(call) {
		return nil
	}
	t.crashed = true
	t.mu.Unlock()
	if t.exitOnCrash {
		os.Exit(3)
	}
	t.teardown()
	t.signal()
	return shutdownError()
}

// crashDue counts a call at a crash point and reports whether a crash rule
// fires on it.
func (t *Transport) crashDue(call string) bool {
	if t.calls == nil {
		return false // not opened: no fault rule yet
	}
	t.calls[call]++
	for i := range t.p.faults {
		r := &t.p.faults[i]
		if r.kind == faultCrash && r.at == call && r.n == t.calls[call] {
			t.faultFired(r)
			return true
		}
	}
	return false
}

// teardown stops the goroutines and frees every native resource, as the
// end of the process would: mappings are unmapped and leases dropped, the
// life lease included (Close then removes its file). The agent is already
// closed or crashed.
func (t *Transport) teardown() {
	close(t.stop)
	t.conn.Close()
	if t.in != nil {
		t.in.stop() // no peer's chunk lands from here on
	}
	t.mu.Lock()
	for _, p := range t.book.Peers() {
		p.Value.hangUp() // an engine waiting on a peer's owner returns
	}
	for _, x := range t.active {
		x.peer.hangUp()
	}
	t.mu.Unlock()
	t.wg.Wait()
	t.mu.Lock()
	defer t.mu.Unlock()
	for m := range t.maps {
		m.unmap()
	}
	for _, r := range t.book.Regions() {
		r.Value.lease.close()
	}
	for _, p := range t.book.Peers() {
		p.Value.life.close()
	}
	for _, x := range t.active {
		x.peer.life.close()
	}
	t.life.close()
	t.home.remove() // every lease file: the agent is gone
	_ = syscall.Close(t.out)
	if t.faultLog != nil {
		t.faultLog.Close()
		t.faultLog = nil
	}
	t.maps, t.active, t.delayed, t.outbox, t.served = nil, nil, nil, nil, nil
}

// kick wakes the DMA engine.
func (t *Transport) kick() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// shutdownError is what a crashed agent answers.
func shutdownError() error {
	return sdk.Errorf(sdk.CodePluginShutdown, "fake: agent crashed (fault crash or Kill); open a new agent")
}

// ungated reports whether misbehave=ungated lets call through the gate of
// an agent that is not open: Poll and Release answer as if it were, after
// Close, and before Open when the mode was given at New (WithMisbehave).
func (t *Transport) ungated(call string) bool {
	return t.p.misbehave == misbehaveUngated && (call == crashAtPoll || call == crashAtRelease)
}
