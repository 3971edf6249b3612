package fake

import (
	"errors"
	"os"
	"syscall"
)

// lease is one side of a registration lease: a lease file that the owner of
// a registered region holds an exclusive flock on for as long as the region
// is registered and its process lives. A peer opens the same file and
// probes it before each chunk: while the owner holds the lock, the peer's
// shared non-blocking flock fails; once the owner deregistered, closed or
// died (the kernel drops the lock with the process), it succeeds.
//
// flock locks belong to open file descriptions, so an owner and a prober in
// one process conflict just as they would in two.
type lease struct {
	f *os.File
}

// acquireLease creates a fresh lease file in dir and locks it exclusively.
func acquireLease(dir string) (*lease, error) {
	f, err := os.CreateTemp(dir, "custody-fake-*.lease")
	if err != nil {
		return nil, err
	}
	if err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &lease{f: f}, nil
}

// openLease opens a peer's lease file, within dirs (openPeerFile), to
// probe it.
func openLease(what, path string, dirs []string) (*lease, error) {
	f, err := openPeerFile(what, path, os.O_RDONLY, dirs)
	if err != nil {
		return nil, err
	}
	return &lease{f: f}, nil
}

// path is where the lease file lives.
func (l *lease) path() string { return l.f.Name() }

// held reports whether the owner still holds the lease. A probe that cannot
// tell reports false: the transfer then ends REMOTE_DISCONNECT rather than
// writing into memory nobody vouches for.
func (l *lease) held() bool {
	err := flock(l.f, syscall.LOCK_SH|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true
	}
	if err == nil {
		_ = flock(l.f, syscall.LOCK_UN)
	}
	return false
}

// release ends the owner's lease and removes its file.
func (l *lease) release() {
	os.Remove(l.f.Name())
	l.f.Close()
}

// close closes a probe (or, in tests, drops an owner's lock as a dying
// process would, leaving the file).
func (l *lease) close() { l.f.Close() }

// flock applies a flock operation, retrying on EINTR.
func flock(f *os.File, how int) error {
	raw, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := raw.Control(func(fd uintptr) {
		for {
			ferr = syscall.Flock(int(fd), how)
			if ferr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	return ferr
}
