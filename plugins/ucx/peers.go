package ucx

import (
	"context"
	"errors"

	"github.com/custody-dev/custody/sdk"
)

// peer is a loaded peer: one endpoint and the unpacked rkey of each of its
// regions.
type peer struct {
	id       sdk.PeerID
	name     string
	proc     procID
	cp       *cPeer
	regions  map[sdk.RegionID]*remoteRegion
	dlists   int        // live remote dlists that reference it
	inflight int        // posts UCX still runs on its endpoint
	sends    int        // notification sends UCX still runs
	lost     error      // REMOTE_DISCONNECT once the peer is known gone
	watch    *procWatch // its process, when UCX cannot report its loss
}

// remoteRegion is one of a peer's regions with its unpacked rkey.
type remoteRegion struct {
	remoteRegionSpec
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
	if err := checkItems("LoadPeers", len(peers)); err != nil {
		return nil, err
	}
	out := make([]sdk.PeerResult, len(peers))
	mds := make([]metadata, len(peers))
	for i, spec := range peers {
		md, err := decodeMetadata(spec.Metadata)
		switch {
		case err != nil:
			out[i].Err = sdk.Errorf(sdk.CodeInvalidArgument, "ucx: LoadPeers %q: %v; pass the blob the peer's LocalMetadata returned", spec.Name, err)
		case spec.Name == "":
			out[i].Err = sdk.Errorf(sdk.CodeInvalidArgument, "ucx: LoadPeers: peer name is empty; give the agent name the metadata came from")
		case spec.Name != md.Agent:
			out[i].Err = sdk.Errorf(sdk.CodeInvalidArgument, "ucx: LoadPeers: name %q differs from the metadata's agent %q", spec.Name, md.Agent)
		}
		mds[i] = md
	}
	err := t.do(ctx, "LoadPeers", func(a *agent) {
		for i := range peers {
			if out[i].Err != nil {
				continue
			}
			out[i].ID, out[i].Err = a.loadPeer(mds[i])
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (a *agent) loadPeer(md metadata) (sdk.PeerID, error) {
	p := &peer{name: md.Agent, proc: md.Proc, regions: map[sdk.RegionID]*remoteRegion{}}
	if a.cfg.watchPeers {
		a.pruneWatches()
		w, err := watchProc(md.Proc, func() { a.onPeerExit(p) })
		if errors.Is(err, errProcGone) {
			return 0, sdk.Errorf(sdk.CodeRemoteDisconnect, "ucx: LoadPeers %q: its process (pid %d) is gone; fetch fresh metadata", md.Agent, md.Proc.Pid)
		}
		if err != nil {
			return 0, sdk.Errorf(sdk.CodeBackend, "ucx: LoadPeers %q: cannot watch its process, and UCX would not report its loss over %s: %v; nothing loaded", md.Agent, a.cfg.tls, err)
		}
		p.watch = w
	}
	cp, st := a.nw.newPeer(md.Address)
	if st != statusOK {
		a.stopWatch(p)
		return 0, sdk.Errorf(sdk.CodeBackend, "ucx: LoadPeers %q: ucp_ep_create: %s; do both agents use the same tls (this one %q, the peer %q)?", md.Agent, st, a.cfg.tls, md.TLS)
	}
	p.cp = cp
	for _, r := range md.Regions {
		rk, st := rkeyUnpack(cp, r.Rkey)
		if st != statusOK {
			a.dropPeer(p)
			return 0, sdk.Errorf(sdk.CodeBackend, "ucx: LoadPeers %q: unpacking the rkey of region %d: %s; nothing loaded", md.Agent, r.ID, st)
		}
		p.regions[r.ID] = &remoteRegion{remoteRegionSpec: r, rkey: rk}
	}
	p.id = sdk.PeerID(a.newID())
	a.peers[p.id] = p
	return p.id, nil
}

// dropPeer destroys a peer's rkeys and starts closing its endpoint: forced
// where the peer is lost and peer error mode allows it, else flushed.
func (a *agent) dropPeer(p *peer) {
	a.stopWatch(p)
	for _, r := range p.regions {
		a.nw.rkeyDestroy(r.rkey)
	}
	p.regions = nil
	if c := a.nw.startClose(p.cp, p.lost != nil && a.cfg.errPeer); c != nil {
		a.closing = append(a.closing, c)
	}
	p.cp = nil
}

// stopWatch stops watching p's process; shutdown waits for the watch's end.
func (a *agent) stopWatch(p *peer) {
	if p.watch != nil {
		p.watch.stop()
		a.watches = append(a.watches, p.watch)
		p.watch = nil
	}
}

// pruneWatches forgets stopped watches whose goroutines ended.
func (a *agent) pruneWatches() {
	kept := a.watches[:0]
	for _, w := range a.watches {
		select {
		case <-w.done:
		default:
			kept = append(kept, w)
		}
	}
	a.watches = kept
}

// UnloadPeers releases peers. A peer a live dlist or transfer references is
// BUSY and stays loaded.
func (t *Transport) UnloadPeers(ctx context.Context, ids []sdk.PeerID) ([]error, error) {
	if err := checkItems("UnloadPeers", len(ids)); err != nil {
		return nil, err
	}
	out := make([]error, len(ids))
	err := t.do(ctx, "UnloadPeers", func(a *agent) {
		for i, id := range ids {
			p, ok := a.peers[id]
			switch {
			case !ok:
				out[i] = sdk.Errorf(sdk.CodeNotFound, "ucx: UnloadPeers: peer %d unknown or already unloaded", id)
			case p.dlists > 0 || p.inflight > 0:
				out[i] = sdk.Errorf(sdk.CodeBusy, "ucx: UnloadPeers: peer %d (%s) is referenced by %d dlists and %d transfers in flight; release them first", id, p.name, p.dlists, p.inflight)
			default:
				delete(a.peers, id)
				a.dropPeer(p)
			}
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
