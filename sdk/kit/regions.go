package kit

import "github.com/custody-dev/custody/sdk"

// Region is registered memory as a Book records it.
type Region[R any] struct {
	ID    sdk.RegionID
	Spec  sdk.Region
	Value R   // the transport's own state: a mapping, a memory handle
	users int // local dlists that use the region, and Hold's holders
}

// Hold pins the region for the transport's own use (for example a native
// request that still reads it): DeregisterMemory is BUSY until Unhold.
func (r *Region[R]) Hold() { r.users++ }

// Unhold drops a pin taken with Hold.
func (r *Region[R]) Unhold() { r.users-- }

// CheckRegion refuses a region no transport can register, as
// INVALID_ARGUMENT: an empty path, a zero length, an offset and length
// that overflow, or a memory kind not in kinds (an empty Kind means
// sdk.MemoryHost). Whether the file exists and is long enough is the
// transport's to check when it maps it.
func (b *Book[R, P, D, H]) CheckRegion(spec sdk.Region, kinds ...sdk.MemoryKind) error {
	kind := spec.Kind
	if kind == "" {
		kind = sdk.MemoryHost
	}
	known := false
	for _, k := range kinds {
		known = known || k == kind
	}
	switch {
	case !known:
		return b.errorf(sdk.CodeInvalidArgument, "RegisterMemory %s: memory kind %q unsupported; use one of %v", spec.Path, kind, kinds)
	case spec.Path == "" || spec.Length == 0:
		return b.errorf(sdk.CodeInvalidArgument, "RegisterMemory: region needs a path and a non-zero length (got path %q, length %d)", spec.Path, spec.Length)
	case spec.Offset+spec.Length < spec.Offset:
		return b.errorf(sdk.CodeInvalidArgument, "RegisterMemory %s: offset %d + length %d overflows", spec.Path, spec.Offset, spec.Length)
	}
	return nil
}

// Register records a region with CheckRegion's rules (host memory
// only): register maps and registers it natively and returns the
// transport's value; when it fails nothing is recorded and its error is
// the item's.
func (b *Book[R, P, D, H]) Register(spec sdk.Region, register func() (R, error)) (sdk.RegionID, error) {
	if err := b.CheckRegion(spec, sdk.MemoryHost); err != nil {
		return 0, err
	}
	v, err := register()
	if err != nil {
		return 0, err
	}
	return b.AddRegion(spec, v).ID, nil
}

// AddRegion records a region the transport registered after its own
// checks, under a fresh id.
func (b *Book[R, P, D, H]) AddRegion(spec sdk.Region, v R) *Region[R] {
	r := &Region[R]{ID: sdk.RegionID(NewID()), Spec: spec, Value: v}
	b.regions[r.ID] = r
	return r
}

// Regions returns every registered region in id order (for metadata).
func (b *Book[R, P, D, H]) Regions() []*Region[R] { return sorted(b.regions) }

// Deregister removes a region: NOT_FOUND when unknown or already
// deregistered, BUSY while a live dlist uses it (or the transport holds
// it). free undoes the native registration; when it fails the region
// stays registered and its error is the item's. free may be nil.
func (b *Book[R, P, D, H]) Deregister(id sdk.RegionID, free func(*Region[R]) error) error {
	r, ok := b.regions[id]
	switch {
	case !ok:
		return b.errorf(sdk.CodeNotFound, "DeregisterMemory: region %d unknown or already deregistered", id)
	case r.users > 0:
		return b.errorf(sdk.CodeBusy, "DeregisterMemory: region %d is used by %d dlists; release them (and their handles) first", id, r.users)
	}
	if free != nil {
		if err := free(r); err != nil {
			return err
		}
	}
	delete(b.regions, id)
	return nil
}
