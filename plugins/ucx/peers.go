package ucx

import (
	"context"
	"errors"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/kit"
)

// peer is a loaded peer's native state, the Book's value for it: one
// endpoint and the unpacked rkey of each of its regions.
type peer struct {
	id       sdk.PeerID // the Book's id, for messages (set once loaded)
	name     string
	proc     kit.Proc
	cp       *cPeer
	rkeys    map[sdk.RegionID]remoteRegion
	inflight int            // posts UCX still runs on its endpoint (for the exit message)
	sends    int            // notification sends UCX still runs
	lost     error          // REMOTE_DISCONNECT once the peer is known gone
	unloaded bool           // set by UnloadPeers: a late watch finds nothing to do
	watch    *kit.ProcWatch // its process, when UCX cannot report its loss
}

// remoteRegion is one of a peer's regions: its address and unpacked rkey.
type remoteRegion struct {
	addr uint64
	rkey cRkey
}

// noteFailure records an endpoint error UCX reported (peer error mode).
func (p *peer) noteFailure() {
	if failed, st := peerFailed(p.cp); failed && p.lost == nil {
		p.lost = sdk.Errorf(sdk.CodeRemoteDisconnect, "ucx: peer %d (%s): endpoint failed: %s; unload it and load its new metadata", p.id, p.name, st)
	}
}

// LoadPeers decodes each peer's metadata, creates one endpoint to it and
// unpacks its rkeys. Garbage metadata is INVALID_ARGUMENT and loads nothing.
func (t *Transport) LoadPeers(ctx context.Context, peers []sdk.PeerSpec) ([]sdk.PeerResult, error) {
	out := make([]sdk.PeerResult, len(peers))
	err := t.do(ctx, "LoadPeers", len(peers), func(a *agent) {
		for i, spec := range peers {
			out[i].ID, out[i].Err = a.book.LoadPeer(spec, func() (kit.Loaded[*peer], error) { return a.loadPeer(spec) })
			if out[i].Err == nil {
				p := a.book.Peer(out[i].ID).Value
				p.id = out[i].ID
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// loadPeer decodes one peer's metadata and reaches it natively.
func (a *agent) loadPeer(spec sdk.PeerSpec) (kit.Loaded[*peer], error) {
	var none kit.Loaded[*peer]
	md, err := decodeMetadata(spec.Metadata)
	switch {
	case err != nil:
		return none, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: LoadPeers %q: %v; pass the blob the peer's LocalMetadata returned", spec.Name, err)
	case spec.Name != md.Agent:
		return none, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: LoadPeers: name %q differs from the metadata's agent %q", spec.Name, md.Agent)
	}
	p := &peer{name: md.Agent, proc: md.Proc, rkeys: map[sdk.RegionID]remoteRegion{}}
	if a.cfg.watchPeers {
		a.pruneWatches()
		w, err := kit.WatchProc(md.Proc, func() { a.t.onPeerExit(p) })
		if errors.Is(err, kit.ErrProcGone) {
			return none, sdk.Errorf(sdk.CodeRemoteDisconnect, "ucx: LoadPeers %q: its process (pid %d) is gone; fetch fresh metadata", md.Agent, md.Proc.Pid)
		}
		if err != nil {
			return none, sdk.Errorf(sdk.CodeBackend, "ucx: LoadPeers %q: cannot watch its process, and UCX would not report its loss over %s: %v; nothing loaded", md.Agent, a.cfg.tls, err)
		}
		p.watch = w
	}
	cp, st := a.nw.newPeer(md.Address)
	if st != statusOK {
		a.stopWatch(p)
		return none, sdk.Errorf(sdk.CodeBackend, "ucx: LoadPeers %q: ucp_ep_create: %s; do both agents use the same tls (this one %q, the peer %q)?", md.Agent, st, a.cfg.tls, md.TLS)
	}
	p.cp = cp
	lengths := make(map[sdk.RegionID]uint64, len(md.Regions))
	for _, r := range md.Regions {
		rk, st := rkeyUnpack(cp, r.Rkey)
		if st != statusOK {
			a.dropPeer(p)
			return none, sdk.Errorf(sdk.CodeBackend, "ucx: LoadPeers %q: unpacking the rkey of region %d: %s; nothing loaded", md.Agent, r.ID, st)
		}
		p.rkeys[r.ID] = remoteRegion{addr: r.Addr, rkey: rk}
		lengths[r.ID] = r.Length
	}
	return kit.Loaded[*peer]{Value: p, Regions: lengths}, nil
}

// dropPeer destroys a peer's rkeys and starts closing its endpoint: forced
// where the peer is lost and peer error mode allows it, else flushed.
func (a *agent) dropPeer(p *peer) {
	p.unloaded = true
	a.stopWatch(p)
	for _, r := range p.rkeys {
		a.nw.rkeyDestroy(r.rkey)
	}
	p.rkeys = nil
	if c := a.nw.startClose(p.cp, p.lost != nil && a.cfg.errPeer); c != nil {
		a.closing = append(a.closing, c)
	}
	p.cp = nil
}

// stopWatch stops watching p's process; shutdown waits for the watch's end.
func (a *agent) stopWatch(p *peer) {
	if p.watch != nil {
		p.watch.Stop()
		a.watches = append(a.watches, p.watch)
		p.watch = nil
	}
}

// pruneWatches forgets stopped watches whose goroutines ended.
func (a *agent) pruneWatches() {
	kept := a.watches[:0]
	for _, w := range a.watches {
		if !w.Ended() {
			kept = append(kept, w)
		}
	}
	a.watches = kept
}

// UnloadPeers releases peers. A peer a live dlist references is BUSY and
// stays loaded (a transfer in flight to it holds its remote dlist).
func (t *Transport) UnloadPeers(ctx context.Context, ids []sdk.PeerID) ([]error, error) {
	out := make([]error, len(ids))
	err := t.do(ctx, "UnloadPeers", len(ids), func(a *agent) {
		for i, id := range ids {
			out[i] = a.book.UnloadPeer(id, func(p *kit.Peer[*peer]) error {
				a.dropPeer(p.Value)
				return nil
			})
		}
		// A graceful close needs a round trip to the peer: wait for it
		// (bounded), so that an unloaded peer holds nothing when this
		// returns. One still closing after that stays counted in Peers.
		a.awaitCloses(ctx)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
