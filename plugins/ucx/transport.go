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

// Transport is one UCX agent: one UCP context and worker, driven by one
// goroutine locked to its OS thread. It implements sdk.Transport and
// sdk.EventSource and is safe for concurrent use: calls queue a command to
// the worker goroutine and wait for its answer, bounded by their context;
// they never progress UCX themselves.
type Transport struct {
	idBase uint64
	exit   func(code int)

	mu     sync.Mutex
	state  int
	cfg    config
	name   string
	cmds   chan func(*agent)
	exited chan struct{}
	// wake is set after a command is queued; the worker loop clears it
	// before draining the queue and ends a spin in C when it turns
	// non-zero. It must stay free of Go pointers (it is passed to C).
	wake atomic.Int32
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
	t := &Transport{exit: os.Exit, cmds: make(chan func(*agent), 64)}
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
	t.exited = make(chan struct{})
	t.idBase = processIDs.reserve()
	opened := make(chan error, 1)
	go t.loop(cfg, req.Agent, opened)
	if err := <-opened; err != nil {
		<-t.exited
		return err
	}
	t.state, t.cfg, t.name = stateOpen, cfg, req.Agent
	return nil
}

// Close ends the agent. It is refused with BUSY while anything is held.
// The check and the end happen in one command on the worker, so nothing
// can be acquired in between; calls queued behind it answer that the
// agent is closed, without effect.
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
		a.stop = true
	})
	if err != nil {
		return err
	}
	if busy != nil {
		return busy
	}
	<-t.exited
	return nil
}

// Resources counts what the agent holds natively.
func (t *Transport) Resources(ctx context.Context) (sdk.Resources, error) {
	var r sdk.Resources
	err := t.do(ctx, "Resources", func(a *agent) { r = a.held() })
	return r, err
}

// do runs fn on the worker goroutine and waits for it, bounded by ctx.
func (t *Transport) do(ctx context.Context, call string, fn func(*agent)) error {
	t.mu.Lock()
	st, name := t.state, t.name
	cmds, exited := t.cmds, t.exited
	t.mu.Unlock()
	switch st {
	case stateNew:
		return sdk.Errorf(sdk.CodeInvalidArgument, "ucx: %s: agent is not open; call Open first", call)
	case stateClosed:
		return sdk.Errorf(sdk.CodeInvalidArgument, "ucx: %s: agent %q is closed; make a new one", call, name)
	}
	done := make(chan struct{})
	select {
	case cmds <- func(a *agent) { fn(a); close(done) }:
		t.wake.Store(1)
	case <-ctx.Done():
		return ctxError(ctx.Err())
	case <-exited:
		return sdk.Errorf(sdk.CodeInvalidArgument, "ucx: %s: agent %q is closed; make a new one", call, name)
	}
	select {
	case <-done:
		return nil
	case <-exited:
		select {
		case <-done:
			return nil
		default:
			return sdk.Errorf(sdk.CodeInvalidArgument, "ucx: %s: agent %q was closed before the call ran; nothing changed", call, name)
		}
	case <-ctx.Done():
		return sdk.Errorf(sdk.CodeTimeout, "ucx: %s: deadline passed while the agent ran the call; whether it took effect is unknown, check with Poll or Resources", call)
	}
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
