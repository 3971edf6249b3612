package ucx

import (
	"context"
	"os"
	"syscall"
	"unsafe"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/kit"
)

// region is registered memory's native state, the Book's value for it:
// the file mapping and its UCP memory handle.
type region struct {
	mapped []byte  // the whole mapping, from a page-aligned offset
	addr   uintptr // the region's first byte
	memh   cMemh
	rkey   []byte // packed, for metadata
}

// RegisterMemory maps each region's file (MAP_SHARED) and registers the
// mapping with ucp_mem_map. A bad item registers nothing and says why.
func (t *Transport) RegisterMemory(ctx context.Context, regions []sdk.Region) ([]sdk.Registration, error) {
	out := make([]sdk.Registration, len(regions))
	err := t.do(ctx, "RegisterMemory", len(regions), func(a *agent) {
		for i, spec := range regions {
			out[i].ID, out[i].Err = a.book.Register(spec, func() (*region, error) { return a.register(spec) })
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// register maps a region (the Book checked its path, length and kind) and
// registers it with UCX; on failure nothing stays mapped.
func (a *agent) register(spec sdk.Region) (*region, error) {
	m, err := mapRegion(spec)
	if err != nil {
		return nil, err
	}
	memh, rk, err := a.nw.memMap(m.addr, spec.Length)
	if err != nil {
		_ = syscall.Munmap(m.mapped)
		return nil, sdk.Errorf(sdk.CodeBackend, "ucx: RegisterMemory %s: %v; nothing registered", spec.Path, err)
	}
	m.memh, m.rkey = memh, rk
	return m, nil
}

// mapRegion maps r's bytes from its file.
func mapRegion(r sdk.Region) (*region, error) {
	f, err := os.OpenFile(r.Path, os.O_RDWR, 0)
	if err != nil {
		return nil, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: RegisterMemory %s: %v; give an existing region file", r.Path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: RegisterMemory %s: %v", r.Path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: RegisterMemory %s: not a regular file", r.Path)
	}
	if uint64(fi.Size()) < r.Offset+r.Length {
		return nil, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: RegisterMemory %s: [%d, +%d) ends past the file's %d bytes; truncate the file to size first", r.Path, r.Offset, r.Length, fi.Size())
	}
	page := uint64(os.Getpagesize())
	base := r.Offset &^ (page - 1)
	skip := r.Offset - base
	b, err := syscall.Mmap(int(f.Fd()), int64(base), int(skip+r.Length), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, sdk.Errorf(sdk.CodeBackend, "ucx: RegisterMemory %s: mmap [%d, +%d): %v", r.Path, r.Offset, r.Length, err)
	}
	return &region{mapped: b, addr: uintptr(unsafe.Pointer(&b[0])) + uintptr(skip)}, nil
}

// DeregisterMemory unregisters and unmaps regions. A region a live dlist
// uses is BUSY and stays registered.
func (t *Transport) DeregisterMemory(ctx context.Context, ids []sdk.RegionID) ([]error, error) {
	out := make([]error, len(ids))
	err := t.do(ctx, "DeregisterMemory", len(ids), func(a *agent) {
		for i, id := range ids {
			out[i] = a.book.Deregister(id, func(r *kit.Region[*region]) error {
				if st := a.nw.memUnmap(r.Value.memh); st != statusOK {
					return sdk.Errorf(sdk.CodeBackend, "ucx: DeregisterMemory: ucp_mem_unmap of region %d: %s; it stays registered", id, st)
				}
				_ = syscall.Munmap(r.Value.mapped)
				return nil
			})
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
