package kit

import (
	"fmt"

	"github.com/custody-dev/custody/sdk"
)

// Dlist is a prepared descriptor list as a Book records it: local (Peer
// nil) over this agent's regions, or remote over a loaded peer's.
type Dlist[R, P, D any] struct {
	ID    sdk.DlistID
	Peer  *Peer[P] // nil for a local list
	Descs []sdk.Descriptor
	// Regions is, for a local list, each descriptor's region (index for
	// index with Descs); nil for a remote list.
	Regions []*Region[R]
	// Value is the transport's own state, set by Prepare's accept: the
	// list resolved to native addresses and keys, say, so that a post
	// finds them by index (Pair.LocalIndex, Pair.RemoteIndex).
	Value D
	users int // unreleased handles that use the list
}

// Local reports whether the list is local.
func (d *Dlist[R, P, D]) Local() bool { return d.Peer == nil }

// Prepare records a dlist after checking it against the tables and the
// limits: no descriptors or more than Limits.MaxDescriptorsPerList, an
// unknown peer, a region unknown here (local) or absent from the peer's
// metadata (remote), a zero length, or a range outside its region are
// INVALID_ARGUMENT. accept, when not nil, may set the list's Value or
// still refuse it (a native preparation that failed); nothing is recorded
// then. A recorded
// list pins its peer, or each distinct region it uses, until released.
func (b *Book[R, P, D, H]) Prepare(spec sdk.DlistSpec, accept func(*Dlist[R, P, D]) error) (sdk.DlistID, error) {
	n := len(spec.Descriptors)
	max := b.limits.MaxDescriptorsPerList
	if n == 0 || (max > 0 && n > int(max)) {
		return 0, b.errorf(sdk.CodeInvalidArgument, "PrepareDescriptors: %d descriptors; give at least 1%s", n, atMost(max))
	}
	d := &Dlist[R, P, D]{Descs: append([]sdk.Descriptor(nil), spec.Descriptors...)}
	if spec.Peer != 0 {
		p, ok := b.peers[spec.Peer]
		if !ok {
			return 0, b.errorf(sdk.CodeInvalidArgument, "PrepareDescriptors: peer %d unknown or unloaded; load it first", spec.Peer)
		}
		d.Peer = p
	} else {
		d.Regions = make([]*Region[R], n)
	}
	for i, desc := range spec.Descriptors {
		var size uint64
		if d.Peer != nil {
			l, ok := d.Peer.Regions[desc.Region]
			if !ok {
				return 0, b.errorf(sdk.CodeInvalidArgument, "PrepareDescriptors: descriptor %d: peer %d (%s) has no region %d in its metadata; reload its metadata after it registers", i, d.Peer.ID, d.Peer.Name, desc.Region)
			}
			size = l
		} else {
			r, ok := b.regions[desc.Region]
			if !ok {
				return 0, b.errorf(sdk.CodeInvalidArgument, "PrepareDescriptors: descriptor %d: local region %d unknown or deregistered", i, desc.Region)
			}
			d.Regions[i], size = r, r.Spec.Length
		}
		if desc.Length == 0 || desc.Offset > size || desc.Length > size-desc.Offset {
			return 0, b.errorf(sdk.CodeInvalidArgument, "PrepareDescriptors: descriptor %d: [%d, +%d) is empty or outside region %d of %d bytes", i, desc.Offset, desc.Length, desc.Region, size)
		}
	}
	if accept != nil {
		if err := accept(d); err != nil {
			return 0, err
		}
	}
	d.ID = sdk.DlistID(NewID())
	b.dlists[d.ID] = d
	d.pin(+1)
	return d.ID, nil
}

// pin adds delta to the users of what d references: its peer, or each
// distinct region once.
func (d *Dlist[R, P, D]) pin(delta int) {
	if d.Peer != nil {
		d.Peer.users += delta
		return
	}
	seen := map[*Region[R]]bool{}
	for _, r := range d.Regions {
		if !seen[r] {
			seen[r] = true
			r.users += delta
		}
	}
}

// Dlist returns a prepared dlist, or nil.
func (b *Book[R, P, D, H]) Dlist(id sdk.DlistID) *Dlist[R, P, D] { return b.dlists[id] }

// ReleaseDlist removes a dlist: NOT_FOUND when unknown or already
// released, BUSY while an unreleased handle (terminal or not) uses it.
// free releases it natively; when it fails the dlist stays valid and its
// error is the item's. free may be nil.
func (b *Book[R, P, D, H]) ReleaseDlist(id sdk.DlistID, free func(*Dlist[R, P, D]) error) error {
	d, ok := b.dlists[id]
	switch {
	case !ok:
		return b.errorf(sdk.CodeNotFound, "ReleaseDescriptors: dlist %d unknown or already released", id)
	case d.users > 0:
		return b.errorf(sdk.CodeBusy, "ReleaseDescriptors: dlist %d is used by %d unreleased handles; release them first", id, d.users)
	}
	if free != nil {
		if err := free(d); err != nil {
			return err
		}
	}
	delete(b.dlists, id)
	d.pin(-1)
	return nil
}

// atMost renders an optional upper bound for a message.
func atMost(max uint32) string {
	if max == 0 {
		return ""
	}
	return fmt.Sprintf(" and at most %d", max)
}
