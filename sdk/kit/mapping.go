package kit

import (
	"os"
	"syscall"
	"unsafe"

	"github.com/custody-dev/custody/sdk"
)

// Mapping is part of a region file mapped shared, so that the engine, the
// host and every agent that maps the file see the same bytes: what a
// transport whose backend moves host memory registers (sdk.Region names
// the file, the offset and the length).
type Mapping struct {
	whole []byte // as mmap returned it, from a page boundary
	// Bytes are the region's bytes.
	Bytes []byte
}

// MapFile maps length bytes from offset of the file at path. A missing
// file or a range past its end is INVALID_ARGUMENT; a failed mmap is
// BACKEND.
func MapFile(path string, offset, length uint64) (*Mapping, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, sdk.Errorf(sdk.CodeInvalidArgument, "region %s: %v; give an existing file", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || uint64(st.Size()) < offset+length {
		return nil, sdk.Errorf(sdk.CodeInvalidArgument, "region %s: [%d, +%d) is not inside the file (%v)", path, offset, length, err)
	}
	start := offset &^ uint64(os.Getpagesize()-1)
	m, err := syscall.Mmap(int(f.Fd()), int64(start), int(offset+length-start), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, sdk.Errorf(sdk.CodeBackend, "region %s: mmap: %v", path, err)
	}
	return &Mapping{whole: m, Bytes: m[offset-start:]}, nil
}

// Addr is the address of the region's first byte, what a native library
// registers.
func (m *Mapping) Addr() uint64 { return uint64(uintptr(unsafe.Pointer(&m.Bytes[0]))) }

// Unmap ends the mapping; its Bytes must not be touched after it.
func (m *Mapping) Unmap() error { return syscall.Munmap(m.whole) }
