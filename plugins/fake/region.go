package fake

import (
	"context"

	"github.com/custody-dev/custody/sdk"
)

// region is memory this agent registered: a mapping of the region's file
// and the lease that grants peers access to it.
type region struct {
	id     sdk.RegionID
	spec   sdk.Region
	m      *mapping
	lease  *lease
	dlists int // live local dlists that use the region
}

// RegisterMemory maps each region's file range and takes its lease. A bad
// region (empty path, zero length, a range beyond the file, an unknown
// memory kind) is INVALID_ARGUMENT and registers nothing.
func (t *Transport) RegisterMemory(ctx context.Context, regions []sdk.Region) ([]sdk.Registration, error) {
	if err := t.lock(ctx, ""); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	out := make([]sdk.Registration, len(regions))
	for i, spec := range regions {
		id, err := t.register(spec)
		out[i] = sdk.Registration{ID: id, Err: err}
	}
	return out, nil
}

func (t *Transport) register(spec sdk.Region) (sdk.RegionID, error) {
	if spec.Kind != "" && spec.Kind != sdk.MemoryHost {
		return 0, sdk.Errorf(sdk.CodeInvalidArgument, "fake: RegisterMemory %s: memory kind %q unsupported; use %q", spec.Path, spec.Kind, sdk.MemoryHost)
	}
	if spec.Path == "" || spec.Length == 0 {
		return 0, sdk.Errorf(sdk.CodeInvalidArgument, "fake: RegisterMemory: region needs a path and a non-zero length (got path %q, length %d)", spec.Path, spec.Length)
	}
	m, err := mapFile(spec.Path, spec.Offset, spec.Length)
	if err != nil {
		return 0, sdk.Errorf(sdk.CodeInvalidArgument, "fake: RegisterMemory %s [%d, +%d): %v", spec.Path, spec.Offset, spec.Length, err)
	}
	l, err := acquireLease(t.home.path)
	if err != nil {
		m.unmap()
		return 0, sdk.Errorf(sdk.CodeBackend, "fake: RegisterMemory %s: lease in %s: %v; check dir=", spec.Path, t.p.dir, err)
	}
	r := &region{id: sdk.RegionID(newID()), spec: spec, m: m, lease: l}
	t.regions[r.id] = r
	t.maps[m] = struct{}{}
	return r.id, nil
}

// DeregisterMemory drops each region's lease, so that peers' transfers into
// it end REMOTE_DISCONNECT, and unmaps it. A region a live dlist uses is
// BUSY and stays registered; an unknown one is NOT_FOUND.
func (t *Transport) DeregisterMemory(ctx context.Context, ids []sdk.RegionID) ([]error, error) {
	if err := t.lock(ctx, ""); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	out := make([]error, len(ids))
	for i, id := range ids {
		r, ok := t.regions[id]
		switch {
		case !ok:
			out[i] = sdk.Errorf(sdk.CodeNotFound, "fake: DeregisterMemory: region %d unknown or already deregistered", id)
		case r.dlists > 0:
			out[i] = sdk.Errorf(sdk.CodeBusy, "fake: DeregisterMemory: region %d is used by %d dlists; release them first", id, r.dlists)
		default:
			delete(t.regions, id)
			r.lease.release()
			t.unref(r.m)
		}
	}
	return out, nil
}

// unref drops a hold on a mapping and forgets it once unmapped.
func (t *Transport) unref(m *mapping) {
	m.unref()
	if m.refs == 0 {
		delete(t.maps, m)
	}
}
