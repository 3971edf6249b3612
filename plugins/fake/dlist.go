package fake

import (
	"context"

	"github.com/custody-dev/custody/sdk"
)

// dlist is a prepared descriptor list: local (peer nil) over this agent's
// regions, or remote over a loaded peer's regions.
type dlist struct {
	id      sdk.DlistID
	peer    *peer
	descs   []desc
	regions []*region // distinct local regions used, each counted once
	handles int       // unreleased handles that use the dlist
}

// desc is one resolved descriptor: its bytes and the mapping they lie in.
type desc struct {
	region sdk.RegionID
	m      *mapping
	offset uint64
	length uint64
}

// bytes returns the descriptor's memory.
func (d desc) bytes() []byte { return d.m.data[d.offset : d.offset+d.length] }

// PrepareDescriptors prepares each dlist. An empty or oversized list, an
// unknown peer or region, a zero length or a range beyond its region is
// INVALID_ARGUMENT and prepares nothing.
func (t *Transport) PrepareDescriptors(ctx context.Context, lists []sdk.DlistSpec) ([]sdk.DlistResult, error) {
	if err := t.lock(ctx, ""); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	out := make([]sdk.DlistResult, len(lists))
	for i, spec := range lists {
		id, err := t.prepare(spec)
		out[i] = sdk.DlistResult{ID: id, Err: err}
	}
	return out, nil
}

func (t *Transport) prepare(spec sdk.DlistSpec) (sdk.DlistID, error) {
	n := len(spec.Descriptors)
	if n == 0 || n > maxDescriptorsPerList {
		return 0, sdk.Errorf(sdk.CodeInvalidArgument, "fake: PrepareDescriptors: %d descriptors; want 1 to %d", n, maxDescriptorsPerList)
	}
	d := &dlist{descs: make([]desc, n)}
	var p *peer
	if spec.Peer != 0 {
		var ok bool
		if p, ok = t.peers[spec.Peer]; !ok {
			return 0, sdk.Errorf(sdk.CodeInvalidArgument, "fake: PrepareDescriptors: peer %d unknown or unloaded; load it first", spec.Peer)
		}
		d.peer = p
	}
	used := map[*region]bool{}
	for i, sd := range spec.Descriptors {
		var m *mapping
		if p != nil {
			m = p.regions[sd.Region]
		} else if r := t.regions[sd.Region]; r != nil {
			m = r.m
			if !used[r] {
				used[r] = true
				d.regions = append(d.regions, r)
			}
		}
		if m == nil {
			return 0, sdk.Errorf(sdk.CodeInvalidArgument, "fake: PrepareDescriptors: descriptor %d: region %d is not registered%s", i, sd.Region, peerSuffix(p))
		}
		size := uint64(len(m.data))
		if sd.Length == 0 || sd.Offset > size || sd.Length > size-sd.Offset {
			return 0, sdk.Errorf(sdk.CodeInvalidArgument, "fake: PrepareDescriptors: descriptor %d: [%d, +%d) is empty or beyond region %d's %d bytes", i, sd.Offset, sd.Length, sd.Region, size)
		}
		d.descs[i] = desc{region: sd.Region, m: m, offset: sd.Offset, length: sd.Length}
	}
	if p != nil {
		rank := t.prepares
		t.prepares++
		if t.fault(faultPrepareFail, 0, p.name, rank) != nil {
			return 0, sdk.Errorf(sdk.CodeBackend, "fake: PrepareDescriptors: injected prepare-fail at remote dlist %d (peer %s); nothing prepared", rank, p.name)
		}
		p.dlists++
	}
	for _, r := range d.regions {
		r.dlists++
	}
	d.id = sdk.DlistID(newID())
	t.dlists[d.id] = d
	return d.id, nil
}

// ReleaseDescriptors releases each dlist. One an unreleased handle uses is
// BUSY and stays valid; an unknown one is NOT_FOUND; one a
// release-dlist-fail fault selects is BACKEND and stays valid.
func (t *Transport) ReleaseDescriptors(ctx context.Context, ids []sdk.DlistID) ([]error, error) {
	if err := t.lock(ctx, ""); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	out := make([]error, len(ids))
	for i, id := range ids {
		d, ok := t.dlists[id]
		switch {
		case !ok:
			out[i] = sdk.Errorf(sdk.CodeNotFound, "fake: ReleaseDescriptors: dlist %d unknown or already released", id)
		case d.handles > 0:
			out[i] = sdk.Errorf(sdk.CodeBusy, "fake: ReleaseDescriptors: dlist %d is used by %d unreleased handles; release them first", id, d.handles)
		case t.fault(faultReleaseDlist, 0, d.peerName(), -1) != nil:
			out[i] = sdk.Errorf(sdk.CodeBackend, "fake: ReleaseDescriptors: injected release-dlist-fail on dlist %d; it stays valid, retry", id)
		default:
			delete(t.dlists, id)
			if d.peer != nil {
				d.peer.dlists--
			}
			for _, r := range d.regions {
				r.dlists--
			}
		}
	}
	return out, nil
}

// peerName is the agent name of a remote dlist's peer, "" for a local one.
func (d *dlist) peerName() string {
	if d.peer == nil {
		return ""
	}
	return d.peer.name
}

func peerSuffix(p *peer) string {
	if p == nil {
		return " here"
	}
	return " by peer " + p.name
}
