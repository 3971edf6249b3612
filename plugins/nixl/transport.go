//go:build nixl

package nixl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/custody-dev/custody/internal/ucxtls"
	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/kit"
)

// regionVal is a registered region: its mapping and native address.
type regionVal struct {
	m    *kit.Mapping
	addr uint64
}

// peerVal is a loaded peer: its NIXL agent name, its regions' addresses
// and, without UCX peer error handling, the watch on its process.
type peerVal struct {
	name    string
	regions map[sdk.RegionID]mdRegion
	watch   *kit.ProcWatch
}

// handleVal is a posted transfer's NIXL request.
type handleVal struct {
	req  unsafe.Pointer
	done bool // postXferReq already returned NIXL_SUCCESS
}

// A dlist's value is its NIXL dlist handle (nixlDlistH).
type (
	book   = kit.Book[*regionVal, *peerVal, unsafe.Pointer, *handleVal]
	dlist  = kit.Dlist[*regionVal, *peerVal, unsafe.Pointer]
	handle = kit.Handle[*regionVal, *peerVal, unsafe.Pointer, *handleVal]
)

// Transport is one NIXL agent behind the contract. It implements
// sdk.Transport and is safe for concurrent use: every call runs under one
// lock, and NIXL's progress thread runs beside them.
type Transport struct {
	mu      sync.Mutex
	book    *book
	desc    sdk.Description
	cfg     config
	nat     *native
	self    kit.Proc
	names   map[string]*nameRef // names.go
	parkSeq uint64
	// stopped are the process watches of unloaded peers, whose goroutines
	// Close waits for.
	stopped []*kit.ProcWatch
	closed  bool

	reqs       []unsafe.Pointer // Poll's scratch
	sts        []int32
	lidx, ridx []int32 // Post's scratch

	exit func(code int) // ends the process when a watched peer dies
}

var _ sdk.Transport = (*Transport)(nil)

// New returns a NIXL transport that is not open yet.
func New() *Transport {
	t := &Transport{names: map[string]*nameRef{}, exit: os.Exit}
	t.desc = describe(config{backend: defaultBackend, tls: envTLS(), errNone: ucxtls.UsesShm(envTLS())})
	t.book = kit.NewBook[*regionVal, *peerVal, unsafe.Pointer, *handleVal]("nixl", t.desc.Limits)
	return t
}

// ctxErr is the error of a call whose context ended before it started:
// nothing changed.
func ctxErr(ctx context.Context) error { return kit.ContextError(ctx, "nixl") }

// Describe states what this agent promises; before Open, what Open without
// parameters would give ($UCX_TLS decides the error handling).
func (t *Transport) Describe(ctx context.Context) (sdk.Description, error) {
	if err := ctxErr(ctx); err != nil {
		return sdk.Description{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.desc, nil
}

// Open creates the nixlAgent, named agent, and its backend.
func (t *Transport) Open(ctx context.Context, req sdk.OpenRequest) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.book.Open(req.Agent, func() error {
		cfg, err := parseParams(req.Params, pluginParams)
		if err != nil {
			return err
		}
		self, err := kit.SelfProc()
		if err != nil {
			return sdk.Errorf(sdk.CodeBackend, "nixl: Open %q: reading this process's start time: %v", req.Agent, err)
		}
		if cfg.backend == "UCX" {
			// NIXL's UCX backend reads UCX_TLS from the environment (it
			// applies its own defaults only to settings left unset there).
			if err := os.Setenv("UCX_TLS", cfg.tls); err != nil {
				return sdk.Errorf(sdk.CodeBackend, "nixl: Open %q: setting UCX_TLS: %v", req.Agent, err)
			}
		}
		nat, st, msg := openNative(req.Agent, cfg.delay(), cfg.backend, cfg.params)
		if nat == nil {
			return sdk.Errorf(sdk.CodeInvalidArgument, "nixl: Open %q: NIXL refused backend %s with %s: %s (%v); check the parameters (plugins/nixl/doc.go lists them)", req.Agent, cfg.backend, cfg, msg, st)
		}
		t.cfg, t.nat, t.self = cfg, nat, self
		t.desc = describe(cfg)
		return nil
	})
}

// Close ends the agent: BUSY while anything is held.
func (t *Transport) Close(ctx context.Context) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	t.mu.Lock()
	closed, err := t.book.Close(func() error {
		t.nat.close()
		return nil
	})
	var watches []*kit.ProcWatch
	if closed {
		t.closed = true
		watches, t.stopped = t.stopped, nil
	}
	t.mu.Unlock()
	// A watch that fires takes the lock: wait for them without it.
	for _, w := range watches {
		w.Wait()
	}
	return err
}

// call opens a batched call of n items: the context, the gate and the
// batch limit. On nil the caller holds t.mu.
func (t *Transport) call(ctx context.Context, name string, n int) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	t.mu.Lock()
	err := t.book.Check()
	if err == nil {
		err = t.book.Items(name, n)
	}
	if err != nil {
		t.mu.Unlock()
	}
	return err
}

// each runs f for n items under the lock.
func each[T any](t *Transport, ctx context.Context, name string, n int, f func(i int) T) ([]T, error) {
	if err := t.call(ctx, name, n); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	out := make([]T, n)
	for i := range out {
		out[i] = f(i)
	}
	return out, nil
}

// RegisterMemory maps each region file and registers it with NIXL (DRAM).
func (t *Transport) RegisterMemory(ctx context.Context, regions []sdk.Region) ([]sdk.Registration, error) {
	return each(t, ctx, "RegisterMemory", len(regions), func(i int) sdk.Registration {
		spec := regions[i]
		id, err := t.book.Register(spec, func() (*regionVal, error) {
			m, err := kit.MapFile(spec.Path, spec.Offset, spec.Length)
			if err != nil {
				return nil, err
			}
			if st := t.nat.register(m.Addr(), spec.Length); st != statusSuccess {
				_ = m.Unmap()
				return nil, sdk.Errorf(sdk.CodeBackend, "nixl: RegisterMemory %s: registerMem returned %v", spec.Path, st)
			}
			return &regionVal{m: m, addr: m.Addr()}, nil
		})
		return sdk.Registration{ID: id, Err: err}
	})
}

// DeregisterMemory deregisters and unmaps regions: BUSY while a dlist uses
// one.
func (t *Transport) DeregisterMemory(ctx context.Context, ids []sdk.RegionID) ([]error, error) {
	return each(t, ctx, "DeregisterMemory", len(ids), func(i int) error {
		return t.book.Deregister(ids[i], func(r *kit.Region[*regionVal]) error {
			if st := t.nat.deregister(r.Value.addr, r.Spec.Length); st != statusSuccess {
				return sdk.Errorf(sdk.CodeBackend, "nixl: DeregisterMemory %d: deregisterMem returned %v; it stays registered", r.ID, st)
			}
			if err := r.Value.m.Unmap(); err != nil {
				return sdk.Errorf(sdk.CodeBackend, "nixl: DeregisterMemory %d: munmap: %v", r.ID, err)
			}
			return nil
		})
	})
}

// LocalMetadata wraps getLocalMD in the envelope (metadata.go).
func (t *Transport) LocalMetadata(ctx context.Context) ([]byte, error) {
	if err := t.call(ctx, "LocalMetadata", 0); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	blob, st := t.nat.localMD()
	if st != statusSuccess {
		return nil, sdk.Errorf(sdk.CodeBackend, "nixl: LocalMetadata: getLocalMD returned %v", st)
	}
	m := metadata{Agent: t.book.Agent(), Proc: t.self, NIXL: blob}
	for _, r := range t.book.Regions() {
		m.Regions = append(m.Regions, mdRegion{ID: r.ID, Addr: r.Value.addr, Len: r.Spec.Length})
	}
	out := m.encode()
	if max := t.desc.Limits.MaxMetadataBytes; len(out) > int(max) {
		return nil, sdk.Errorf(sdk.CodeBackend, "nixl: LocalMetadata: %d bytes exceed the limit of %d; register fewer regions", len(out), max)
	}
	return out, nil
}

// LoadPeers loads each peer's NIXL metadata (loadRemoteMD) after checking
// the envelope and the name.
func (t *Transport) LoadPeers(ctx context.Context, peers []sdk.PeerSpec) ([]sdk.PeerResult, error) {
	return each(t, ctx, "LoadPeers", len(peers), func(i int) sdk.PeerResult {
		spec := peers[i]
		id, err := t.book.LoadPeer(spec, func() (kit.Loaded[*peerVal], error) { return t.load(spec) })
		return sdk.PeerResult{ID: id, Err: err}
	})
}

func (t *Transport) load(spec sdk.PeerSpec) (kit.Loaded[*peerVal], error) {
	var none kit.Loaded[*peerVal]
	m, err := decodeMetadata(spec.Metadata)
	if err != nil {
		return none, err
	}
	switch {
	case m.Agent != spec.Name:
		return none, sdk.Errorf(sdk.CodeInvalidArgument, "nixl: LoadPeers %q: the metadata is agent %q's; load it under that name", spec.Name, m.Agent)
	case m.Agent == t.book.Agent():
		return none, sdk.Errorf(sdk.CodeInvalidArgument, "nixl: LoadPeers %q: that is this agent; NIXL loads no agent's own metadata (this transport claims no Local transfers)", spec.Name)
	}
	ref := t.names[m.Agent]
	if ref != nil && ref.lost {
		return none, sdk.Errorf(sdk.CodeRemoteDisconnect, "nixl: LoadPeers %q: NIXL reported this agent disconnected and dropped it; unload its other peer ids first, then load its new metadata", spec.Name)
	}
	pv := &peerVal{name: m.Agent, regions: map[sdk.RegionID]mdRegion{}}
	if t.cfg.errNone {
		// Without peer error handling UCX reports no dead peer: watch
		// its process (the peer shares this host, as shared memory needs).
		w, err := kit.WatchProc(m.Proc, func() { t.onPeerExit(pv) })
		if errors.Is(err, kit.ErrProcGone) {
			return none, sdk.Errorf(sdk.CodeRemoteDisconnect, "nixl: LoadPeers %q: its process (pid %d) is gone; fetch its new metadata", spec.Name, m.Proc.Pid)
		}
		if err != nil {
			return none, sdk.Errorf(sdk.CodeBackend, "nixl: LoadPeers %q: watching its process: %v", spec.Name, err)
		}
		pv.watch = w
	}
	name, st := t.loadName(m.Agent, m.NIXL)
	if st != statusSuccess || name != m.Agent {
		if pv.watch != nil {
			pv.watch.Stop()
			t.stopped = append(t.stopped, pv.watch)
		}
		if st == statusSuccess { // cannot happen: the envelope and NIXL's blob disagree
			if t.names[name] == nil {
				t.nat.invalidate(name)
			}
			return none, sdk.Errorf(sdk.CodeInvalidArgument, "nixl: LoadPeers %q: NIXL's metadata inside names agent %q", spec.Name, name)
		}
		if st == statusInvalidParam {
			return none, sdk.Errorf(sdk.CodeInvalidArgument, "nixl: LoadPeers %q: loadRemoteMD returned %v; nothing loaded", spec.Name, st)
		}
		if ref := t.names[m.Agent]; ref != nil && ref.refs > 0 {
			// NIXL refuses (NOT_ALLOWED) an agent it holds under another
			// connection; the C API says ERROR_BACKEND.
			return none, sdk.Errorf(sdk.CodeInvalidArgument, "nixl: LoadPeers %q: loadRemoteMD returned %v: NIXL holds agent %q, loaded for another peer, with other metadata; nothing loaded", spec.Name, st, m.Agent)
		}
		return none, sdk.Errorf(sdk.CodeBackend, "nixl: LoadPeers %q: loadRemoteMD returned %v; nothing loaded", spec.Name, st)
	}
	regions := make(map[sdk.RegionID]uint64, len(m.Regions))
	for _, r := range m.Regions {
		regions[r.ID] = r.Len
		pv.regions[r.ID] = r
	}
	return kit.Loaded[*peerVal]{Value: pv, Regions: regions}, nil
}

// onPeerExit runs when a watched peer's process exited (no UCX peer error
// handling): UCX would never complete requests to it, so this process
// exits and the host fences it (PeerLossProcessExits).
func (t *Transport) onPeerExit(pv *peerVal) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	for _, p := range t.book.Peers() {
		if p.Value == pv {
			fmt.Fprintf(os.Stderr, "custody-transport-nixl: agent %q: loaded peer %q (pid watch) exited; UCX reports no dead peer without peer error handling (%s), exiting so the host fences this transport\n",
				t.book.Agent(), pv.name, t.cfg)
			t.exit(exitPeerLost)
			return
		}
	}
}

// exitPeerLost is the process's exit status after a watched peer died.
const exitPeerLost = 4

// UnloadPeers releases peers (names.go: when NIXL's state of the agent is
// invalidated): BUSY while a dlist references one.
func (t *Transport) UnloadPeers(ctx context.Context, ids []sdk.PeerID) ([]error, error) {
	return each(t, ctx, "UnloadPeers", len(ids), func(i int) error {
		return t.book.UnloadPeer(ids[i], func(p *kit.Peer[*peerVal]) error {
			if err := t.unloadName(p.Value.name); err != nil {
				return err
			}
			if w := p.Value.watch; w != nil {
				w.Stop()
				t.stopped = append(t.stopped, w)
			}
			return nil
		})
	})
}

// PrepareDescriptors prepares each dlist with prepXferDlist.
func (t *Transport) PrepareDescriptors(ctx context.Context, lists []sdk.DlistSpec) ([]sdk.DlistResult, error) {
	return each(t, ctx, "PrepareDescriptors", len(lists), func(i int) sdk.DlistResult {
		id, err := t.book.Prepare(lists[i], func(d *dlist) error {
			addrs := make([]uint64, len(d.Descs))
			lens := make([]uint64, len(d.Descs))
			agent := ""
			for k, desc := range d.Descs {
				base := uint64(0)
				if d.Local() {
					base = d.Regions[k].Value.addr
				} else {
					base = d.Peer.Value.regions[desc.Region].Addr
				}
				addrs[k], lens[k] = base+desc.Offset, desc.Length
			}
			if !d.Local() {
				agent = d.Peer.Value.name
				if t.names[agent].lost {
					return sdk.Errorf(sdk.CodeBackend, "nixl: PrepareDescriptors: peer %d (%s) was reported disconnected; unload it and load its new metadata", d.Peer.ID, d.Peer.Name)
				}
			}
			h, st := t.nat.prep(agent, addrs, lens)
			if st != statusSuccess {
				return sdk.Errorf(sdk.CodeBackend, "nixl: PrepareDescriptors: prepXferDlist returned %v; nothing prepared", st)
			}
			d.Value = h
			return nil
		})
		return sdk.DlistResult{ID: id, Err: err}
	})
}

// ReleaseDescriptors releases dlists: BUSY while a handle uses one.
func (t *Transport) ReleaseDescriptors(ctx context.Context, ids []sdk.DlistID) ([]error, error) {
	return each(t, ctx, "ReleaseDescriptors", len(ids), func(i int) error {
		return t.book.ReleaseDlist(ids[i], func(d *dlist) error {
			if st := t.nat.releaseDlist(d.Value); st != statusSuccess {
				return sdk.Errorf(sdk.CodeBackend, "nixl: ReleaseDescriptors %d: releasedDlistH returned %v; it stays prepared", d.ID, st)
			}
			return nil
		})
	})
}

// Post makes and posts each transfer (makeXferReq, postXferReq), with its
// notification.
func (t *Transport) Post(ctx context.Context, posts []sdk.PostSpec) ([]sdk.PostResult, error) {
	return each(t, ctx, "Post", len(posts), func(i int) sdk.PostResult {
		spec := posts[i]
		id, err := t.book.Post(spec, func(h *handle) error { return t.start(spec, h) })
		if err == nil {
			if h, _ := t.book.Handle("Post", id); h.Value.done {
				t.book.Complete(h, sdk.StateDone, nil)
			}
		}
		return sdk.PostResult{ID: id, Err: err}
	})
}

func (t *Transport) start(spec sdk.PostSpec, h *handle) error {
	peer := h.Remote.Peer.Value.name
	if t.names[peer].lost {
		return sdk.Errorf(sdk.CodeRemoteDisconnect, "nixl: Post to %s: NIXL reported the peer disconnected; nothing posted", peer)
	}
	t.lidx, t.ridx = t.lidx[:0], t.ridx[:0]
	for k := range spec.LocalIndices {
		t.lidx = append(t.lidx, int32(spec.LocalIndices[k]))
		t.ridx = append(t.ridx, int32(spec.RemoteIndices[k]))
	}
	req, st := t.nat.post(spec.Op == sdk.OpWrite, h.Local.Value, t.lidx, h.Remote.Value, t.ridx, h.Notification, len(h.Notification) > 0)
	switch st {
	case statusInProg, statusSuccess:
		h.Value = &handleVal{req: req, done: st == statusSuccess}
		return nil
	}
	// A post that failed issued nothing that still runs: NIXL's UCX
	// backend releases what it started when a put or get fails to start,
	// which happens only on an endpoint that failed.
	if req != nil {
		t.nat.releaseReq(req)
	}
	if gone(st) {
		t.names[peer].lost = true
		return sdk.Errorf(sdk.CodeRemoteDisconnect, "nixl: Post to %s: postXferReq returned %v; nothing posted", peer, st)
	}
	return sdk.Errorf(sdk.CodeBackend, "nixl: Post to %s: makeXferReq/postXferReq returned %v; nothing posted", peer, st)
}

// Poll asks getXferStatus of each running handle (which also progresses
// NIXL's UCX worker) and reports its state.
func (t *Transport) Poll(ctx context.Context, ids []sdk.HandleID) ([]sdk.HandleStatus, error) {
	if err := t.call(ctx, "Poll", len(ids)); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	t.reqs = t.reqs[:0]
	var running []*handle
	for _, id := range ids {
		if h, err := t.book.Handle("Poll", id); err == nil {
			if st, _ := h.State(); !st.Terminal() {
				running = append(running, h)
				t.reqs = append(t.reqs, h.Value.req)
			}
		}
	}
	if len(running) > 0 {
		t.sts = append(t.sts[:0], make([]int32, len(running))...)
		t.nat.statuses(t.reqs, t.sts)
		for k, h := range running {
			t.settle(h, status(t.sts[k]))
		}
	}
	out := make([]sdk.HandleStatus, len(ids))
	for i, id := range ids {
		out[i] = t.book.Poll(id)
	}
	return out, nil
}

// gone says whether a call to a peer that returned st failed because the
// peer is gone. NIXL answers REMOTE_DISCONNECT for every request on a UCX
// endpoint that failed, and NOT_FOUND once it dropped the peer; NIXL's C
// API folds REMOTE_DISCONNECT into ERROR_BACKEND with NIXL's other
// failures. A call that reached the peer's endpoint and failed is taken
// as that endpoint failing: UCX fails an endpoint (and every request on
// it) on the error of any one request when peer error handling is on.
func gone(st status) bool {
	return st == statusNotFound || st == statusBackend
}

// settle turns a running handle terminal when NIXL says it is.
func (t *Transport) settle(h *handle, st status) {
	peer := h.Remote.Peer
	switch {
	case st == statusInProg:
	case st == statusSuccess:
		t.book.Complete(h, sdk.StateDone, nil)
	case gone(st):
		// The peer's UCX endpoint failed, which ends every request on it.
		t.names[peer.Value.name].lost = true
		t.book.Complete(h, sdk.StateFailed, sdk.Errorf(sdk.CodeRemoteDisconnect, "nixl: transfer to %s: getXferStatus returned %v: the peer is gone", peer.Name, st))
	default:
		t.book.Complete(h, sdk.StateFailed, sdk.Errorf(sdk.CodeBackend, "nixl: transfer to %s: getXferStatus returned %v", peer.Name, st))
	}
}

// Cancel asks nothing of NIXL: it has no cancel of a posted transfer
// (CancelNone). It frees nothing.
func (t *Transport) Cancel(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	return each(t, ctx, "Cancel", len(ids), func(i int) error { return t.book.Cancel(ids[i], nil) })
}

// Release frees terminal handles with releaseXferReq: BUSY while one runs,
// never NIXL's release of a running request (which would try to abort
// it).
func (t *Transport) Release(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	return each(t, ctx, "Release", len(ids), func(i int) error {
		return t.book.Release(ids[i], func(h *handle) error {
			if st := t.nat.releaseReq(h.Value.req); st != statusSuccess {
				return sdk.Errorf(sdk.CodeBackend, "nixl: Release %d: releaseXferReq returned %v; the handle stays held", h.ID, st)
			}
			return nil
		})
	})
}

// SendNotifications sends each message with genNotif.
func (t *Transport) SendNotifications(ctx context.Context, msgs []sdk.OutboundNotification) ([]error, error) {
	return each(t, ctx, "SendNotifications", len(msgs), func(i int) error {
		p, err := t.book.CheckSend(msgs[i])
		if err != nil {
			return err
		}
		if t.names[p.Value.name].lost {
			return sdk.Errorf(sdk.CodeRemoteDisconnect, "nixl: SendNotifications to %s: NIXL reported the peer disconnected; not sent", p.Name)
		}
		switch st := t.nat.genNotif(p.Value.name, msgs[i].Message); {
		case st == statusSuccess || st == statusInProg:
			return nil
		case gone(st):
			return sdk.Errorf(sdk.CodeRemoteDisconnect, "nixl: SendNotifications to %s: genNotif returned %v; not sent", p.Name, st)
		default:
			return sdk.Errorf(sdk.CodeBackend, "nixl: SendNotifications to %s: genNotif returned %v; not sent", p.Name, st)
		}
	})
}

// Notifications drains getNotifs into the inbox and returns up to max.
func (t *Transport) Notifications(ctx context.Context, max int) ([]sdk.Notification, error) {
	if err := t.call(ctx, "Notifications", 0); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	got, st := t.nat.notifs()
	for _, n := range got {
		t.book.Deliver(n.From, n.Message)
	}
	out := t.book.Notifications(max)
	if st < 0 && len(out) == 0 {
		return nil, sdk.Errorf(sdk.CodeBackend, "nixl: Notifications: getNotifs returned %v", st)
	}
	return out, nil
}

// Resources counts what the agent holds.
func (t *Transport) Resources(ctx context.Context) (sdk.Resources, error) {
	if err := ctxErr(ctx); err != nil {
		return sdk.Resources{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.book.Resources(), nil
}
