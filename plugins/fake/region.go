package fake

import (
	"context"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/kit"
)

// The fake's bookkeeping is a kit.Book over its own values: a region's
// mapping and lease, a peer's mappings and probes, a handle's injected
// faults. The Book holds the contract's rules (ids, NOT_FOUND, BUSY pins,
// handle states, events, inbox, gate, limits); this package holds the
// simulation.
type (
	book   = kit.Book[*region, *peer, struct{}, handleFaults]
	handle = kit.Handle[*region, *peer, struct{}, handleFaults]
)

// region is memory this agent registered: a mapping of the region's file
// and the lease that grants peers access to it.
type region struct {
	m     *mapping
	lease *lease
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
		var r *region
		id, err := t.book.Register(spec, func() (v *region, err error) { r, err = t.register(spec); return r, err })
		if err == nil {
			t.served[id] = r
		}
		out[i] = sdk.Registration{ID: id, Err: err}
	}
	return out, nil
}

func (t *Transport) register(spec sdk.Region) (*region, error) {
	m, err := mapFile(spec.Path, spec.Offset, spec.Length)
	if err != nil {
		return nil, sdk.Errorf(sdk.CodeInvalidArgument, "fake: RegisterMemory %s [%d, +%d): %v", spec.Path, spec.Offset, spec.Length, err)
	}
	l, err := acquireLease(t.home.path)
	if err != nil {
		m.unmap()
		return nil, sdk.Errorf(sdk.CodeBackend, "fake: RegisterMemory %s: lease in %s: %v; check dir=", spec.Path, t.p.dir, err)
	}
	t.maps[m] = struct{}{}
	return &region{m: m, lease: l}, nil
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
		out[i] = t.book.Deregister(id, func(r *kit.Region[*region]) error {
			delete(t.served, r.ID) // peers' chunks into it are refused from now on
			r.Value.lease.release()
			t.unref(r.Value.m)
			return nil
		})
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
