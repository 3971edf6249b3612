package fake

import (
	"fmt"
	"os"
	"syscall"
)

// mapping is a MAP_SHARED mapping of part of a region file. It is counted:
// the region or peer that made it holds one reference and every transfer
// that touches it holds one more, so memory a misbehaving transfer still
// writes is never unmapped under it. The last unref unmaps it and closes
// its lease probe.
type mapping struct {
	whole []byte // as returned by mmap, for munmap
	data  []byte // the region's bytes within whole
	probe *lease // the owner's lease, for a peer's region; nil otherwise
	refs  int
}

// mapFile maps length bytes from offset of the file at path, read-write and
// shared, so that writes reach every other mapping of the file.
func mapFile(path string, offset, length uint64) (*mapping, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return mapOpen(f, offset, length)
}

// mapOpen is mapFile of the file f, which it closes.
func mapOpen(f *os.File, offset, length uint64) (*mapping, error) {
	defer f.Close()
	if length == 0 {
		return nil, fmt.Errorf("length is zero")
	}
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if offset+length < offset || offset+length > uint64(st.Size()) {
		return nil, fmt.Errorf("range [%d, %d) lies beyond the file's %d bytes", offset, offset+length, st.Size())
	}
	page := uint64(os.Getpagesize())
	start := offset &^ (page - 1)
	whole, err := syscall.Mmap(int(f.Fd()), int64(start), int(offset+length-start), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	return &mapping{whole: whole, data: whole[offset-start:], refs: 1}, nil
}

// ref adds a holder.
func (m *mapping) ref() { m.refs++ }

// unref drops a holder and unmaps when it was the last.
func (m *mapping) unref() {
	m.refs--
	if m.refs > 0 {
		return
	}
	m.unmap()
}

// unmap ends the mapping at once, whatever its holders.
func (m *mapping) unmap() {
	if m.whole != nil {
		_ = syscall.Munmap(m.whole)
		m.whole, m.data = nil, nil
	}
	if m.probe != nil {
		m.probe.close()
		m.probe = nil
	}
}
