package proccost

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Syscalls counts the system calls of one process from when it was opened:
// a counter of the raw_syscalls:sys_enter tracepoint on each of its
// threads, inherited by every thread and process they start after.
type Syscalls struct {
	pid int
	fds map[int]int // thread id -> counter
}

// tracefs is where the kernel's tracing file system may be mounted.
var tracefs = []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}

var sysEnter struct {
	once sync.Once
	id   uint64
	err  error
}

// sysEnterID is the id of the raw_syscalls:sys_enter tracepoint. Where no
// tracing file system is mounted it mounts one at /sys/kernel/tracing (this
// needs root), as perf does.
func sysEnterID() (uint64, error) {
	sysEnter.once.Do(func() {
		read := func() (uint64, error) {
			var errs []error
			for _, dir := range tracefs {
				b, err := os.ReadFile(dir + "/events/raw_syscalls/sys_enter/id")
				if err != nil {
					errs = append(errs, err)
					continue
				}
				return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
			}
			return 0, errors.Join(errs...)
		}
		if sysEnter.id, sysEnter.err = read(); sysEnter.err == nil {
			return
		}
		if err := unix.Mount("nodev", tracefs[0], "tracefs", 0, ""); err != nil {
			sysEnter.err = fmt.Errorf("the raw_syscalls:sys_enter tracepoint: %w; mounting tracefs at %s: %w", sysEnter.err, tracefs[0], err)
			return
		}
		sysEnter.id, sysEnter.err = read()
	})
	return sysEnter.id, sysEnter.err
}

// OpenSyscalls starts counting pid's system calls. It fails where the kernel
// does not let this process count them (no tracefs, no root or CAP_PERFMON,
// a seccomp filter), saying why.
func OpenSyscalls(pid int) (*Syscalls, error) {
	id, err := sysEnterID()
	if err != nil {
		return nil, err
	}
	s := &Syscalls{pid: pid, fds: map[int]int{}}
	// Threads started before their starter's counter opened are missed by
	// inheritance: list again until no thread is new.
	for {
		tids, err := tasks(pid)
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		added := false
		for _, tid := range tids {
			if _, ok := s.fds[tid]; ok {
				continue
			}
			attr := unix.PerfEventAttr{
				Type:   unix.PERF_TYPE_TRACEPOINT,
				Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
				Config: id,
				Bits:   unix.PerfBitInherit,
			}
			fd, err := unix.PerfEventOpen(&attr, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
			if errors.Is(err, unix.ESRCH) {
				continue // the thread ended
			}
			if err != nil {
				_ = s.Close()
				return nil, fmt.Errorf("perf_event_open(raw_syscalls:sys_enter, thread %d of %d): %w", tid, pid, err)
			}
			s.fds[tid] = fd
			added = true
		}
		if !added {
			return s, nil
		}
	}
}

// Count is the system calls made since OpenSyscalls by the process's
// threads and what they started, ended ones included.
func (s *Syscalls) Count() (int64, error) {
	var n int64
	var b [8]byte
	for tid, fd := range s.fds {
		if _, err := unix.Read(fd, b[:]); err != nil {
			return 0, fmt.Errorf("reading the system call counter of thread %d of %d: %w", tid, s.pid, err)
		}
		n += int64(binary.NativeEndian.Uint64(b[:]))
	}
	return n, nil
}

// Close stops counting.
func (s *Syscalls) Close() error {
	var errs []error
	for _, fd := range s.fds {
		errs = append(errs, unix.Close(fd))
	}
	s.fds = nil
	return errors.Join(errs...)
}
