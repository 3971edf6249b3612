package nixl

import (
	"os"
	"syscall"
	"unsafe"

	"github.com/custody-dev/custody/sdk"
)

// mapping is part of a region file mapped shared, so that the engine, the
// host and this agent see the same bytes.
type mapping struct {
	whole []byte // as mmap returned it, from a page boundary
	bytes []byte // the region's bytes within whole
}

// mapFile maps length bytes from offset of the file at path. A missing
// file or a range past its end is INVALID_ARGUMENT.
func mapFile(path string, offset, length uint64) (*mapping, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, sdk.Errorf(sdk.CodeInvalidArgument, "nixl: region %s: %v; give an existing file", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || uint64(st.Size()) < offset+length {
		return nil, sdk.Errorf(sdk.CodeInvalidArgument, "nixl: region %s: [%d, +%d) is not inside the file (%v)", path, offset, length, err)
	}
	start := offset &^ uint64(os.Getpagesize()-1)
	m, err := syscall.Mmap(int(f.Fd()), int64(start), int(offset+length-start), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, sdk.Errorf(sdk.CodeBackend, "nixl: region %s: mmap: %v", path, err)
	}
	return &mapping{whole: m, bytes: m[offset-start:]}, nil
}

// addr is the address of the region's first byte.
func (m *mapping) addr() uint64 { return uint64(uintptr(unsafe.Pointer(&m.bytes[0]))) }

// unmap ends the mapping.
func (m *mapping) unmap() error { return syscall.Munmap(m.whole) }
