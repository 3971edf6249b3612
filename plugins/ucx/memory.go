package ucx

import (
	"context"
	"os"
	"syscall"
	"unsafe"

	"github.com/custody-dev/custody/sdk"
)

// region is registered memory: the file mapping and its UCP memory handle.
type region struct {
	id     sdk.RegionID
	path   string
	mapped []byte  // the whole mapping, from a page-aligned offset
	addr   uintptr // the region's first byte
	length uint64
	memh   cMemh
	rkey   []byte // packed, for metadata
	dlists int    // live local dlists that use it
}

// RegisterMemory maps each region's file (MAP_SHARED) and registers the
// mapping with ucp_mem_map. A bad item registers nothing and says why.
func (t *Transport) RegisterMemory(ctx context.Context, regions []sdk.Region) ([]sdk.Registration, error) {
	if err := checkItems("RegisterMemory", len(regions)); err != nil {
		return nil, err
	}
	out := make([]sdk.Registration, len(regions))
	// Mapping files is I/O: do it here, not on the worker thread.
	maps := make([]*region, len(regions))
	for i, r := range regions {
		maps[i], out[i].Err = mapRegion(r)
	}
	err := t.do(ctx, "RegisterMemory", func(a *agent) {
		for i, m := range maps {
			if m == nil {
				continue
			}
			memh, rk, err := a.nw.memMap(m.addr, m.length)
			if err != nil {
				out[i].Err = sdk.Errorf(sdk.CodeBackend, "ucx: RegisterMemory %s: %v; nothing registered", m.path, err)
				continue
			}
			m.memh, m.rkey = memh, rk
			m.id = sdk.RegionID(a.newID())
			a.regions[m.id] = m
			out[i].ID = m.id
			maps[i] = nil
		}
	})
	// What the worker did not take (errors, or a call that never ran) is
	// unmapped here. On a timeout the worker may still take it: leave it.
	if err == nil || sdk.CodeOf(err) != sdk.CodeTimeout {
		for _, m := range maps {
			if m != nil {
				_ = syscall.Munmap(m.mapped)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// mapRegion validates r and maps its bytes.
func mapRegion(r sdk.Region) (*region, error) {
	if r.Kind != "" && r.Kind != sdk.MemoryHost {
		return nil, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: RegisterMemory %s: memory kind %q unsupported; use %q", r.Path, r.Kind, sdk.MemoryHost)
	}
	if r.Path == "" || r.Length == 0 {
		return nil, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: RegisterMemory: region needs a path and a non-zero length (got path %q, length %d)", r.Path, r.Length)
	}
	if r.Offset+r.Length < r.Offset {
		return nil, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: RegisterMemory %s: offset %d + length %d overflows", r.Path, r.Offset, r.Length)
	}
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
	return &region{path: r.Path, mapped: b, addr: uintptr(unsafe.Pointer(&b[0])) + uintptr(skip), length: r.Length}, nil
}

// DeregisterMemory unregisters and unmaps regions. A region a live dlist
// uses is BUSY and stays registered.
func (t *Transport) DeregisterMemory(ctx context.Context, ids []sdk.RegionID) ([]error, error) {
	if err := checkItems("DeregisterMemory", len(ids)); err != nil {
		return nil, err
	}
	out := make([]error, len(ids))
	var unmap [][]byte
	err := t.do(ctx, "DeregisterMemory", func(a *agent) {
		for i, id := range ids {
			r, ok := a.regions[id]
			switch {
			case !ok:
				out[i] = sdk.Errorf(sdk.CodeNotFound, "ucx: DeregisterMemory: region %d unknown or already deregistered", id)
			case r.dlists > 0:
				out[i] = sdk.Errorf(sdk.CodeBusy, "ucx: DeregisterMemory: region %d is used by %d dlists; release them (and their handles) first", id, r.dlists)
			default:
				if st := a.nw.memUnmap(r.memh); st != statusOK {
					out[i] = sdk.Errorf(sdk.CodeBackend, "ucx: DeregisterMemory: ucp_mem_unmap of region %d: %s; it stays registered", id, st)
					continue
				}
				delete(a.regions, id)
				unmap = append(unmap, r.mapped)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	for _, b := range unmap {
		_ = syscall.Munmap(b)
	}
	return out, nil
}

// checkItems refuses a batch over the per-call limit as a whole.
func checkItems(call string, n int) error {
	if n > maxItemsPerCall {
		return sdk.Errorf(sdk.CodeInvalidArgument, "ucx: %s: %d items exceed the limit of %d per call; split the batch", call, n, maxItemsPerCall)
	}
	return nil
}
