package ring

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The ring file: created by the host, 0600 in a private 0700 directory,
// checked and mapped by the plugin, unlinked by the host once both sides
// mapped it (or the plugin refused it). A Client or Server unmaps its
// mapping when it stops; Unmap is for a mapping that never got one.

// shmDir is where ring files are made: /dev/shm, else the temp directory.
func shmDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() && unix.Access("/dev/shm", unix.W_OK) == nil {
		return "/dev/shm"
	}
	return os.TempDir()
}

// CreateFile creates and maps a ring file of layout l in a private
// directory; remove undoes the names (not the mapping).
func CreateFile(l Layout) (mem []byte, path string, remove func(), err error) {
	dir, err := os.MkdirTemp(shmDir(), "custody-rings-")
	if err != nil {
		return nil, "", nil, fmt.Errorf("ring directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		os.Remove(dir)
		return nil, "", nil, fmt.Errorf("ring directory %s: %w", dir, err)
	}
	path = filepath.Join(dir, "rings")
	remove = func() { os.Remove(path); os.Remove(dir) }
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		remove()
		return nil, "", nil, fmt.Errorf("ring file %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, 0o600); err != nil {
		remove()
		return nil, "", nil, fmt.Errorf("ring file %s: %w", path, err)
	}
	if err := unix.Ftruncate(fd, int64(l.size())); err != nil {
		remove()
		return nil, "", nil, fmt.Errorf("ring file %s: size %d: %w", path, l.size(), err)
	}
	mem, err = unix.Mmap(fd, 0, l.size(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		remove()
		return nil, "", nil, fmt.Errorf("map ring file %s: %w", path, err)
	}
	writeHeader(mem, l)
	return mem, path, remove, nil
}

// AttachFile opens and checks the ring file at path, as the host named
// it: a regular file of this user, mode 0600, whose header is valid and
// states its size. It returns the mapping.
func AttachFile(path string) ([]byte, Layout, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, Layout{}, fmt.Errorf("open ring file %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, Layout{}, fmt.Errorf("stat ring file %s: %w", path, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, Layout{}, fmt.Errorf("ring file %s is not a regular file", path)
	case st.Mode&0o777 != 0o600:
		return nil, Layout{}, fmt.Errorf("ring file %s has mode %#o, want 0600", path, st.Mode&0o777)
	case int(st.Uid) != os.Geteuid():
		return nil, Layout{}, fmt.Errorf("ring file %s belongs to uid %d, not to this process's %d", path, st.Uid, os.Geteuid())
	case st.Size < headerSize || st.Size > int64(DefaultLayout.size())*16:
		return nil, Layout{}, fmt.Errorf("ring file %s has %d bytes; not a ring file of this version", path, st.Size)
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, Layout{}, fmt.Errorf("map ring file %s: %w", path, err)
	}
	l, err := readHeader(mem)
	if err != nil {
		_ = unix.Munmap(mem)
		return nil, Layout{}, fmt.Errorf("ring file %s: %w", path, err)
	}
	return mem, l, nil
}

// Unmap unmaps a mapping that CreateFile or AttachFile returned and no
// Client or Server serves (the plugin refused it).
func Unmap(mem []byte) error { return unix.Munmap(mem) }
