package kit

import "github.com/custody-dev/custody/sdk"

// Peer is a loaded peer as a Book records it.
type Peer[P any] struct {
	ID   sdk.PeerID
	Name string // the agent name it was loaded under (PeerSpec.Name)
	// Regions are the peer's registered regions, by the peer's ids, with
	// their lengths: what its remote descriptors may name.
	Regions map[sdk.RegionID]uint64
	Value   P   // the transport's own state: an endpoint, mapped files
	users   int // remote dlists that reference the peer, and Hold's holders
}

// Hold pins the peer for the transport's own use (for example a
// notification still being sent to it): UnloadPeers is BUSY until Unhold.
func (p *Peer[P]) Hold() { p.users++ }

// Unhold drops a pin taken with Hold.
func (p *Peer[P]) Unhold() { p.users-- }

// Loaded is what a transport's load callback returns for a peer: its own
// value and the peer's regions with their lengths, read from the metadata.
type Loaded[P any] struct {
	Value   P
	Regions map[sdk.RegionID]uint64
}

// LoadPeer records a peer. An empty name and metadata over
// Limits.MaxMetadataBytes are INVALID_ARGUMENT; otherwise load decodes the
// metadata and reaches the peer natively (garbage metadata is its
// INVALID_ARGUMENT, a dead peer its REMOTE_DISCONNECT). When load fails
// nothing is recorded and its error is the item's.
func (b *Book[R, P, D, H]) LoadPeer(spec sdk.PeerSpec, load func() (Loaded[P], error)) (sdk.PeerID, error) {
	if spec.Name == "" {
		return 0, b.errorf(sdk.CodeInvalidArgument, "LoadPeers: peer name is empty; give the agent name the metadata came from")
	}
	if max := b.limits.MaxMetadataBytes; max > 0 && len(spec.Metadata) > int(max) {
		return 0, b.errorf(sdk.CodeInvalidArgument, "LoadPeers %q: metadata of %d bytes exceeds the limit of %d", spec.Name, len(spec.Metadata), max)
	}
	l, err := load()
	if err != nil {
		return 0, err
	}
	p := &Peer[P]{ID: sdk.PeerID(NewID()), Name: spec.Name, Regions: l.Regions, Value: l.Value}
	if p.Regions == nil {
		p.Regions = map[sdk.RegionID]uint64{}
	}
	b.peers[p.ID] = p
	return p.ID, nil
}

// Peer returns a loaded peer, or nil.
func (b *Book[R, P, D, H]) Peer(id sdk.PeerID) *Peer[P] { return b.peers[id] }

// Peers returns every loaded peer in id order.
func (b *Book[R, P, D, H]) Peers() []*Peer[P] { return sorted(b.peers) }

// UnloadPeer removes a peer: NOT_FOUND when unknown or already unloaded,
// BUSY while a live dlist references it (or the transport holds it). free
// releases it natively; when it fails the peer stays loaded and its error
// is the item's. free may be nil.
func (b *Book[R, P, D, H]) UnloadPeer(id sdk.PeerID, free func(*Peer[P]) error) error {
	p, ok := b.peers[id]
	switch {
	case !ok:
		return b.errorf(sdk.CodeNotFound, "UnloadPeers: peer %d unknown or already unloaded", id)
	case p.users > 0:
		return b.errorf(sdk.CodeBusy, "UnloadPeers: peer %d (%s) is referenced by %d dlists; release them first", id, p.Name, p.users)
	}
	if free != nil {
		if err := free(p); err != nil {
			return err
		}
	}
	delete(b.peers, id)
	return nil
}

// CheckSend resolves a notification's peer and checks its size: an
// unknown peer and a message over Limits.MaxNotificationBytes are
// INVALID_ARGUMENT. An empty message is allowed.
func (b *Book[R, P, D, H]) CheckSend(m sdk.OutboundNotification) (*Peer[P], error) {
	p, ok := b.peers[m.Peer]
	if !ok {
		return nil, b.errorf(sdk.CodeInvalidArgument, "SendNotifications: peer %d unknown or unloaded; load it first", m.Peer)
	}
	if max := b.limits.MaxNotificationBytes; max > 0 && len(m.Message) > int(max) {
		return nil, b.errorf(sdk.CodeInvalidArgument, "SendNotifications to %s: %d bytes exceed the limit of %d", p.Name, len(m.Message), max)
	}
	return p, nil
}
