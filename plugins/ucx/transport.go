package ucx

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"

	"github.com/custody-dev/custody/sdk"
)

// Version is the UCX transport's version, as Describe reports it.
const Version = "0.1.0"

// Limits the transport enforces, as Describe reports them.
const (
	maxDescriptorsPerList = 1 << 16
	maxDescriptorsPerPost = 1 << 16
	maxItemsPerCall       = 1 << 16
	maxNotificationBytes  = 4096
	maxMetadataBytes      = 1 << 20
	// peerLossBoundMillis bounds how long a dead peer takes to show: tcp
	// sees a killed peer's reset connection at once, and UCX's keepalive
	// (10 s idle, then 2 s probes) an idle host that vanished; a watched
	// shared-memory peer is checked every watchEvery. See the package
	// documentation for what it does not cover.
	peerLossBoundMillis = 30000
)

// Lifecycle states of a Transport.
const (
	stateNew = iota
	stateOpen
	stateClosed
)

// Transport is one UCX agent: one UCP context and worker, progressed by
// a thread of the shim's own. It implements sdk.Transport and
// sdk.EventSource and is safe for concurrent use: each call runs on its
// caller's goroutine under the agent's lock, issues what it must to UCX
// there (a Post's puts and flush go out before Post returns), and reads
// what the progress thread finished without waiting for it.
type Transport struct {
	exit func(code int)
	wake *waker // Wake's channel

	mu    sync.Mutex
	state int
	cfg   config
	name  string
	agent atomic.Pointer[agent] // set by Open
}

var (
	_ sdk.Transport   = (*Transport)(nil)
	_ sdk.EventSource = (*Transport)(nil)
)

// Option configures a Transport at New.
type Option func(*Transport)

// WithExit replaces how the transport ends its process when a watched
// peer dies with requests in flight (default os.Exit). Tests use it to
// observe the exit in-process.
func WithExit(exit func(code int)) Option {
	return func(t *Transport) { t.exit = exit }
}

// New returns an agent that is not open yet.
func New(opts ...Option) *Transport {
	t := &Transport{exit: os.Exit, wake: newWaker()}
	for _, o := range opts {
		o(t)
	}
	return t
}

// Describe says what the transport promises. Before Open it describes the
// configuration Open without a tls parameter would get ($UCX_TLS, else
// tcp); after Open, the configuration opened.
func (t *Transport) Describe(ctx context.Context) (sdk.Description, error) {
	t.mu.Lock()
	cfg, st := t.cfg, t.state
	t.mu.Unlock()
	if st == stateNew {
		var err error
		if cfg, err = parseParams(nil); err != nil {
			return sdk.Description{}, err
		}
	}
	return describe(cfg), nil
}

// describe is the Description of an agent configured as cfg.
func describe(cfg config) sdk.Description {
	loss := sdk.PeerLossReported
	if cfg.watchPeers {
		loss = sdk.PeerLossProcessExits
	}
	return sdk.Description{
		Name:          "ucx",
		Version:       Version,
		ContractMajor: sdk.ContractMajor,
		ContractMinor: sdk.ContractMinor,
		MemoryKinds:   []sdk.MemoryKind{sdk.MemoryHost},
		Capabilities:  sdk.Capabilities{Remote: true, Local: true, Notifications: true, Cancel: false, Events: true},
		CancelEffect:  sdk.CancelNone,
		PeerLoss:      loss,
		// A peer that maps our memory directly (posix, sysv) is not fenced
		// by killing us; claim only what always holds.
		FenceScope: sdk.FenceInitiated,
		Limits: sdk.Limits{
			MaxDescriptorsPerList: maxDescriptorsPerList,
			MaxDescriptorsPerPost: maxDescriptorsPerPost,
			MaxItemsPerCall:       maxItemsPerCall,
			MaxNotificationBytes:  maxNotificationBytes,
			MaxMetadataBytes:      maxMetadataBytes,
			PeerLossBoundMillis:   peerLossBoundMillis,
		},
	}
}

// Open creates the agent's UCP context and worker and starts its loop.
func (t *Transport) Open(ctx context.Context, req sdk.OpenRequest) error {
	if err := ctx.Err(); err != nil {
		return ctxError(err)
	}
	if req.Agent == "" {
		return sdk.Errorf(sdk.CodeInvalidArgument, "ucx: Open: agent name is empty; name the agent")
	}
	if len(req.Agent) > maxNameBytes {
		return sdk.Errorf(sdk.CodeInvalidArgument, "ucx: Open: agent name is %d bytes, over the limit of %d", len(req.Agent), maxNameBytes)
	}
	cfg, err := parseParams(req.Params)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state != stateNew {
		return sdk.Errorf(sdk.CodeInvalidArgument, "ucx: Open: agent %q was opened before; an agent opens once, make a new one", t.name)
	}
	a, err := openAgent(cfg, req.Agent, processIDs.reserve(), t.exit, t.wake)
	if err != nil {
		return err
	}
	t.agent.Store(a)
	t.state, t.cfg, t.name = stateOpen, cfg, req.Agent
	return nil
}

// Close ends the agent. It is refused with BUSY while anything is held.
// The check and the end happen under the agent's lock, so nothing can be
// acquired in between; later calls answer that the agent is closed,
// without effect.
func (t *Transport) Close(ctx context.Context) error {
	var busy error
	err := t.do(ctx, "Close", func(a *agent) {
		a.awaitCloses(ctx)
		if r := a.held(); !r.Zero() {
			busy = sdk.Errorf(sdk.CodeBusy, "ucx: Close of agent %q: still held: %d regions, %d peers, %d dlists, %d handles, %d in flight; release them first", a.name, r.Regions, r.Peers, r.Dlists, r.Handles, r.InFlight)
			return
		}
		if len(a.sends) > 0 {
			busy = sdk.Errorf(sdk.CodeBusy, "ucx: Close of agent %q: %d notification sends still running; retry", a.name, len(a.sends))
			return
		}
		t.mu.Lock()
		t.state = stateClosed
		t.mu.Unlock()
		a.closed = true
	})
	if err != nil {
		return err
	}
	if busy != nil {
		return busy
	}
	t.agent.Load().shutdown()
	t.wake.signal() // every call now answers that the agent is closed
	return nil
}

// Resources counts what the agent holds natively.
func (t *Transport) Resources(ctx context.Context) (sdk.Resources, error) {
	var r sdk.Resources
	err := t.do(ctx, "Resources", func(a *agent) { r = a.held() })
	return r, err
}

// do runs fn on the calling goroutine with the agent's lock held, after
// taking what the progress thread finished.
func (t *Transport) do(ctx context.Context, call string, fn func(*agent)) error {
	a := t.agent.Load()
	if a == nil {
		return sdk.Errorf(sdk.CodeInvalidArgument, "ucx: %s: agent is not open; call Open first", call)
	}
	if err := ctx.Err(); err != nil {
		return ctxError(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return sdk.Errorf(sdk.CodeInvalidArgument, "ucx: %s: agent %q is closed; make a new one", call, a.name)
	}
	a.reap()
	fn(a)
	return nil
}

// ctxError is the error for a call whose context ended before it started.
func ctxError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return sdk.Errorf(sdk.CodeTimeout, "ucx: deadline passed before the call started; nothing changed")
	}
	return sdk.Errorf(sdk.CodeCanceled, "ucx: context canceled before the call started; nothing changed")
}

// maxNameBytes bounds an agent name, which travels in metadata and with
// every notification.
const maxNameBytes = 256

// processIDs hands each agent of this process a disjoint id range, so that
// no id repeats within the process even across agents.
var processIDs idRanges

type idRanges struct {
	mu   sync.Mutex
	next uint64
}

// reserve returns the base of a fresh range of 1<<40 ids.
func (r *idRanges) reserve() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	base := r.next
	r.next += 1 << 40
	return base
}
