package fake

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/kit"
)

// peer is a loaded peer agent: its regions mapped here, each with a probe
// of its owner's lease (nil under fence=initiated), a probe of the agent's
// life lease, and its notification address.
type peer struct {
	name    string
	notify  *net.UnixAddr
	life    *lease // probe of the agent's life lease: held while it lives
	regions map[sdk.RegionID]*mapping
	refs    int // holders of the life probe: the peer table and transfers
	// in is the connection to the peer's incoming socket, when the peer
	// copies chunks into its memory itself (fence=incoming there); nil
	// when this agent copies through its own mapping.
	in *incomingConn
}

// alive reports whether the peer agent still lives (it has neither closed
// nor died).
func (p *peer) alive() bool { return p.life.held() }

// hold adds a holder of the peer's life probe.
func (p *peer) hold() { p.refs++ }

// drop removes a holder and closes the life probe after the last.
func (p *peer) drop() {
	p.refs--
	if p.refs == 0 {
		p.life.close()
		p.hangUp()
	}
}

// hangUp closes the connection to the peer's incoming socket, if any: a
// chunk waiting on it fails at once.
func (p *peer) hangUp() {
	if p.in != nil {
		p.in.close()
	}
}

// LoadPeers loads each peer from its metadata, mapping the peer's region
// files. An empty name, garbage metadata, or a name that differs from the
// metadata's agent, is INVALID_ARGUMENT; a peer that closed or died, or
// (unless fence=initiated) whose region lease is no longer held, is
// REMOTE_DISCONNECT. A failed item loads nothing.
func (t *Transport) LoadPeers(ctx context.Context, peers []sdk.PeerSpec) ([]sdk.PeerResult, error) {
	if err := t.lock(ctx, ""); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	out := make([]sdk.PeerResult, len(peers))
	for i, spec := range peers {
		id, err := t.book.LoadPeer(spec, func() (kit.Loaded[*peer], error) { return t.loadPeer(spec) })
		out[i] = sdk.PeerResult{ID: id, Err: err}
	}
	return out, nil
}

func (t *Transport) loadPeer(spec sdk.PeerSpec) (kit.Loaded[*peer], error) {
	var none kit.Loaded[*peer]
	md, err := decodeMetadata(spec.Metadata)
	if err != nil {
		return none, sdk.Errorf(sdk.CodeInvalidArgument, "fake: LoadPeers %q: %v; pass the blob the peer's LocalMetadata returned", spec.Name, err)
	}
	if spec.Name != md.Agent {
		return none, sdk.Errorf(sdk.CodeInvalidArgument, "fake: LoadPeers: name %.256q differs from the metadata's agent %.256q", spec.Name, md.Agent)
	}
	if err := checkPeerPaths(md, t.p.peerDirs); err != nil {
		return none, sdk.Errorf(sdk.CodeInvalidArgument, "fake: LoadPeers %.256q: %v; nothing loaded", spec.Name, err)
	}
	rank := t.loads
	t.loads++
	if t.fault(faultLoadPeerFail, 0, md.Agent, rank) != nil {
		return none, sdk.Errorf(sdk.CodeBackend, "fake: LoadPeers %q: injected load-peer-fail at item %d; nothing loaded", md.Agent, rank)
	}
	life, err := openLease("life lease", md.Life, t.p.peerDirs)
	if errors.Is(err, errNotAllowed) {
		return none, sdk.Errorf(sdk.CodeInvalidArgument, "fake: LoadPeers %.256q: %v; nothing loaded", md.Agent, err)
	}
	if err != nil {
		return none, sdk.Errorf(sdk.CodeRemoteDisconnect, "fake: LoadPeers %q: life lease: %v; the peer closed or died, fetch fresh metadata", md.Agent, err)
	}
	p := &peer{name: md.Agent, notify: &net.UnixAddr{Name: md.Notify, Net: "unixgram"}, life: life, regions: map[sdk.RegionID]*mapping{}, refs: 1}
	if !p.alive() {
		life.close()
		return none, sdk.Errorf(sdk.CodeRemoteDisconnect, "fake: LoadPeers %q: its life lease is not held; the peer closed or died, fetch fresh metadata", md.Agent)
	}
	if md.Incoming != "" {
		if p.in, err = dialIncoming(md.Incoming); err != nil {
			life.close()
			return none, sdk.Errorf(sdk.CodeRemoteDisconnect, "fake: LoadPeers %q: incoming socket: %v; the peer closed or died, fetch fresh metadata", md.Agent, err)
		}
	}
	lengths := map[sdk.RegionID]uint64{}
	for _, r := range md.Regions {
		m, err := t.mapPeerRegion(md.Agent, r)
		if err != nil {
			for _, m := range p.regions {
				m.unmap()
			}
			life.close()
			p.hangUp()
			return none, err
		}
		p.regions[sdk.RegionID(r.ID)] = m
		lengths[sdk.RegionID(r.ID)] = r.Length
	}
	for _, m := range p.regions {
		t.maps[m] = struct{}{}
	}
	return kit.Loaded[*peer]{Value: p, Regions: lengths}, nil
}

// mapPeerRegion maps one of a peer's regions and, unless fence=initiated,
// opens and checks its lease.
func (t *Transport) mapPeerRegion(agent string, r metaRegion) (*mapping, error) {
	var probe *lease
	if t.p.fence != fenceInitiated {
		l, err := openLease(fmt.Sprintf("region %d lease", r.ID), r.Lease, t.p.peerDirs)
		if errors.Is(err, errNotAllowed) {
			return nil, sdk.Errorf(sdk.CodeInvalidArgument, "fake: LoadPeers %.256q: %v; nothing loaded", agent, err)
		}
		if err != nil {
			return nil, sdk.Errorf(sdk.CodeRemoteDisconnect, "fake: LoadPeers %q: region %d lease: %v; the peer deregistered it or died, fetch fresh metadata", agent, r.ID, err)
		}
		if !l.held() {
			l.close()
			return nil, sdk.Errorf(sdk.CodeRemoteDisconnect, "fake: LoadPeers %q: region %d lease is not held; the peer deregistered it or died, fetch fresh metadata", agent, r.ID)
		}
		probe = l
	}
	f, err := openPeerFile(fmt.Sprintf("region %d", r.ID), r.Path, os.O_RDWR, t.p.peerDirs)
	var m *mapping
	if err == nil {
		m, err = mapOpen(f, r.Offset, r.Length)
	}
	if err != nil {
		if probe != nil {
			probe.close()
		}
		if errors.Is(err, errNotAllowed) {
			return nil, sdk.Errorf(sdk.CodeInvalidArgument, "fake: LoadPeers %.256q: %v; nothing loaded", agent, err)
		}
		return nil, sdk.Errorf(sdk.CodeBackend, "fake: LoadPeers %q: cannot map region %d (%s): %v; peers must share a host", agent, r.ID, r.Path, err)
	}
	m.probe = probe
	return m, nil
}

// UnloadPeers unmaps each peer's regions. A peer a live dlist references is
// BUSY and stays loaded; an unknown one is NOT_FOUND; one an unload-fail
// fault selects is BACKEND and stays loaded.
func (t *Transport) UnloadPeers(ctx context.Context, ids []sdk.PeerID) ([]error, error) {
	if err := t.lock(ctx, ""); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	out := make([]error, len(ids))
	for i, id := range ids {
		out[i] = t.book.UnloadPeer(id, func(kp *kit.Peer[*peer]) error {
			p := kp.Value
			if t.fault(faultUnloadFail, 0, p.name, -1) != nil {
				return sdk.Errorf(sdk.CodeBackend, "fake: UnloadPeers: injected unload-fail on peer %d (%s); it stays loaded, retry", id, p.name)
			}
			for _, m := range p.regions {
				t.unref(m)
			}
			p.drop()
			return nil
		})
	}
	return out, nil
}
