package ucx

import (
	"context"

	"github.com/custody-dev/custody/sdk"
)

// dlist is a prepared descriptor list: local entries resolve to addresses
// and memory handles, remote ones to remote addresses and rkeys.
type dlist struct {
	id      sdk.DlistID
	peer    *peer // nil for a local list
	local   []localDesc
	remote  []remoteDesc
	handles int // unreleased handles that use it
}

type localDesc struct {
	region *region
	addr   uintptr
	length uint64
}

type remoteDesc struct {
	addr   uint64
	length uint64
	rkey   cRkey
}

// PrepareDescriptors prepares local (Peer == 0) or remote dlists. Every
// descriptor must lie inside its region; a bad list prepares nothing.
func (t *Transport) PrepareDescriptors(ctx context.Context, lists []sdk.DlistSpec) ([]sdk.DlistResult, error) {
	if err := checkItems("PrepareDescriptors", len(lists)); err != nil {
		return nil, err
	}
	out := make([]sdk.DlistResult, len(lists))
	err := t.do(ctx, "PrepareDescriptors", func(a *agent) {
		for i, spec := range lists {
			out[i].ID, out[i].Err = a.prepare(spec)
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (a *agent) prepare(spec sdk.DlistSpec) (sdk.DlistID, error) {
	n := len(spec.Descriptors)
	if n == 0 || n > maxDescriptorsPerList {
		return 0, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: PrepareDescriptors: %d descriptors; give 1 to %d", n, maxDescriptorsPerList)
	}
	d := &dlist{}
	if spec.Peer == 0 {
		d.local = make([]localDesc, n)
		for j, desc := range spec.Descriptors {
			r, ok := a.regions[desc.Region]
			if !ok {
				return 0, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: PrepareDescriptors: descriptor %d: local region %d unknown or deregistered", j, desc.Region)
			}
			if err := inBounds(j, desc, r.length); err != nil {
				return 0, err
			}
			d.local[j] = localDesc{region: r, addr: r.addr + uintptr(desc.Offset), length: desc.Length}
		}
		for _, l := range d.local {
			l.region.dlists++
		}
	} else {
		p, ok := a.peers[spec.Peer]
		if !ok {
			return 0, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: PrepareDescriptors: peer %d unknown or unloaded", spec.Peer)
		}
		d.peer = p
		d.remote = make([]remoteDesc, n)
		for j, desc := range spec.Descriptors {
			r, ok := p.regions[desc.Region]
			if !ok {
				return 0, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: PrepareDescriptors: descriptor %d: peer %d (%s) has no region %d in its metadata; reload its metadata after it registers", j, p.id, p.name, desc.Region)
			}
			if err := inBounds(j, desc, r.Length); err != nil {
				return 0, err
			}
			d.remote[j] = remoteDesc{addr: r.Addr + desc.Offset, length: desc.Length, rkey: r.rkey}
		}
		p.dlists++
	}
	d.id = sdk.DlistID(a.newID())
	a.dlists[d.id] = d
	return d.id, nil
}

// inBounds checks that descriptor j lies inside a region of size n.
func inBounds(j int, d sdk.Descriptor, n uint64) error {
	if d.Length == 0 || d.Offset >= n || d.Length > n-d.Offset {
		return sdk.Errorf(sdk.CodeInvalidArgument, "ucx: PrepareDescriptors: descriptor %d [%d, +%d) is empty or outside region %d of %d bytes", j, d.Offset, d.Length, d.Region, n)
	}
	return nil
}

// ReleaseDescriptors releases dlists. A dlist an unreleased handle uses is
// BUSY and stays valid.
func (t *Transport) ReleaseDescriptors(ctx context.Context, ids []sdk.DlistID) ([]error, error) {
	if err := checkItems("ReleaseDescriptors", len(ids)); err != nil {
		return nil, err
	}
	out := make([]error, len(ids))
	err := t.do(ctx, "ReleaseDescriptors", func(a *agent) {
		for i, id := range ids {
			d, ok := a.dlists[id]
			switch {
			case !ok:
				out[i] = sdk.Errorf(sdk.CodeNotFound, "ucx: ReleaseDescriptors: dlist %d unknown or already released", id)
			case d.handles > 0:
				out[i] = sdk.Errorf(sdk.CodeBusy, "ucx: ReleaseDescriptors: dlist %d is used by %d unreleased handles; release them first", id, d.handles)
			default:
				delete(a.dlists, id)
				if d.peer != nil {
					d.peer.dlists--
				}
				for _, l := range d.local {
					l.region.dlists--
				}
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
