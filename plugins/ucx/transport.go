package ucx

import (
	"context"
	"os"
	"sync"
	"sync/atomic"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/kit"
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

// The Book's types: a region's mapping and memory handle, a peer's
// endpoint and rkeys, a remote dlist resolved to remote addresses and
// rkeys; a handle keeps nothing native (its op id is its handle id).
type (
	book   = kit.Book[*region, *peer, []remoteDesc, struct{}]
	handle = kit.Handle[*region, *peer, []remoteDesc, struct{}]
	dlist  = kit.Dlist[*region, *peer, []remoteDesc]
)

// Transport is one UCX agent: one UCP context and worker, progressed by
// a thread of the shim's own. It implements sdk.Transport and
// sdk.EventSource and is safe for concurrent use: each call runs on its
// caller's goroutine under the agent's lock, issues what it must to UCX
// there (a Post's puts and flush go out before Post returns), and reads
// what the progress thread finished without waiting for it. The
// contract's bookkeeping (tables, pins, handle states, events, inbox, the
// Open/Close gate, limits) is a kit.Book; this package does the native
// work.
type Transport struct {
	exit func(code int)
	wake *waker // Wake's channel

	mu    sync.Mutex
	book  *book
	agent atomic.Pointer[agent] // the native agent, set by Open
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
	t := &Transport{exit: os.Exit, wake: newWaker(), book: kit.NewBook[*region, *peer, []remoteDesc, struct{}]("ucx", describe(config{}).Limits)}
	for _, o := range opts {
		o(t)
	}
	return t
}

// Describe says what the transport promises. Before Open it describes the
// configuration Open without a tls parameter would get ($UCX_TLS, else
// tcp); after Open, the configuration opened.
func (t *Transport) Describe(ctx context.Context) (sdk.Description, error) {
	if a := t.agent.Load(); a != nil {
		return describe(a.cfg), nil
	}
	cfg, err := parseParams(nil)
	if err != nil {
		return sdk.Description{}, err
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
		// Incoming transfers too where only our process copies into our
		// memory (fence.go); initiated only wherever a peer may write into
		// it itself.
		FenceScope: fenceScope(cfg.tls),
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
	if err := kit.ContextError(ctx, "ucx"); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.book.Open(req.Agent, func() error {
		if len(req.Agent) > maxNameBytes {
			return sdk.Errorf(sdk.CodeInvalidArgument, "ucx: Open: agent name is %d bytes, over the limit of %d", len(req.Agent), maxNameBytes)
		}
		cfg, err := parseParams(req.Params)
		if err != nil {
			return err
		}
		a, err := openAgent(cfg, req.Agent, t)
		if err != nil {
			return err
		}
		t.agent.Store(a)
		return nil
	})
}

// Close ends the agent. It is refused with BUSY while anything is held,
// an endpoint still closes or a notification is still being sent. The
// check and the end happen under the agent's lock, so nothing can be
// acquired in between; later calls answer that the agent is closed,
// without effect.
func (t *Transport) Close(ctx context.Context) error {
	if err := kit.ContextError(ctx, "ucx"); err != nil {
		return err
	}
	t.mu.Lock()
	a := t.agent.Load()
	if a != nil && t.book.Opened() {
		a.reap()
		a.awaitCloses(ctx)
	}
	closed, err := t.book.Close(func() error {
		if n := len(a.closing); n > 0 {
			return sdk.Errorf(sdk.CodeBusy, "ucx: Close of agent %q: %d endpoint closes still running; retry", a.name, n)
		}
		if n := len(a.sends); n > 0 {
			return sdk.Errorf(sdk.CodeBusy, "ucx: Close of agent %q: %d notification sends still running; retry", a.name, n)
		}
		return nil
	})
	t.mu.Unlock()
	if closed {
		a.shutdown(&t.mu)
		t.wake.signal() // every call now answers that the agent is closed
	}
	return err
}

// Resources counts what the agent holds: the Book's counts, and as Peers
// also the endpoints of unloaded peers UCX still closes.
func (t *Transport) Resources(ctx context.Context) (sdk.Resources, error) {
	if err := kit.ContextError(ctx, "ucx"); err != nil {
		return sdk.Resources{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.book.Opened() {
		return sdk.Resources{}, nil
	}
	a := t.agent.Load()
	a.reap()
	r := t.book.Resources()
	r.Peers += uint64(len(a.closing))
	return r, nil
}

// do runs fn for a call of n items on the calling goroutine with the
// agent's lock held, after the gate and the per-call limit let it through
// and after taking what the progress thread finished.
func (t *Transport) do(ctx context.Context, call string, n int, fn func(*agent)) error {
	if err := kit.ContextError(ctx, "ucx"); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.book.Check(); err != nil {
		return err
	}
	if err := t.book.Items(call, n); err != nil {
		return err
	}
	a := t.agent.Load()
	a.reap()
	fn(a)
	return nil
}

// maxNameBytes bounds an agent name, which travels in metadata and with
// every notification.
const maxNameBytes = 256
