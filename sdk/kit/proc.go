package kit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Proc names a process across pid reuse: its pid and its start time in
// clock ticks since boot (field 22 of /proc/PID/stat). A transport whose
// backend cannot report a peer's death (shared memory, some error modes)
// carries its agent's Proc in its metadata, and a peer on the same host
// watches it with WatchProc.
type Proc struct {
	Pid   uint32
	Start uint64
}

// SelfProc is this process's Proc.
func SelfProc() (Proc, error) {
	pid := os.Getpid()
	start, _, err := ProcStat(pid)
	if err != nil {
		return Proc{}, err
	}
	return Proc{Pid: uint32(pid), Start: start}, nil
}

// Alive reports whether the process still runs: it exists, has the same
// start time (so its pid was not reused) and is not a zombie.
func (p Proc) Alive() bool {
	start, state, err := ProcStat(int(p.Pid))
	if err != nil {
		// Only a missing process is dead; any other failure to read
		// /proc (a transient error) must not end this one.
		return !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ESRCH)
	}
	return start == p.Start && state != 'Z' && state != 'X'
}

// ProcStat reads a process's start time and state from /proc.
func ProcStat(pid int) (start uint64, state byte, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields after it start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); field 22 (starttime) is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields after the command", pid, len(f))
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: start time %q: %w", pid, f[19], err)
	}
	return start, f[0][0], nil
}

// ProcWatch waits, on a pidfd in Go's poller, for one process to exit: no
// timer and no CPU while it lives.
type ProcWatch struct {
	f    *os.File
	done chan struct{}
}

// ErrProcGone is a watched process that is already gone.
var ErrProcGone = errors.New("process is gone")

// WatchProc calls dead, on a goroutine of its own, once p exits, unless
// Stop is called first. It fails with ErrProcGone when p is no longer running (its pid may have
// been reused: the start time is checked once the pidfd pins the pid).
func WatchProc(p Proc, dead func()) (*ProcWatch, error) {
	fd, err := pidfdOpen(int(p.Pid))
	if errors.Is(err, syscall.ESRCH) {
		return nil, ErrProcGone
	}
	if err != nil {
		return nil, fmt.Errorf("pidfd_open(%d): %w", p.Pid, err)
	}
	if !p.Alive() {
		_ = syscall.Close(fd)
		return nil, ErrProcGone
	}
	f := os.NewFile(uintptr(fd), fmt.Sprintf("pidfd:%d", p.Pid))
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("pidfd of %d: %w", p.Pid, err)
	}
	w := &ProcWatch{f: f, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		exited := false
		err := rc.Read(func(fd uintptr) bool {
			// A pidfd turns readable when its process exits.
			exited = pidfdExited(fd)
			return exited
		})
		if err == nil && exited {
			dead()
		}
	}()
	return w, nil
}

// Stop ends the watch: dead is not called after it returns, unless it
// already runs.
func (w *ProcWatch) Stop() { _ = w.f.Close() }

// Wait waits for the watch's goroutine to end (after Stop, or after dead
// returned).
func (w *ProcWatch) Wait() { <-w.done }

// Ended reports, without waiting, whether the watch's goroutine ended.
func (w *ProcWatch) Ended() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// pidfdOpen returns a non-blocking pidfd of pid.
func pidfdOpen(pid int) (int, error) { return unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK) }

// pidfdExited reports whether the process of pidfd fd has exited (the
// pidfd is readable).
func pidfdExited(fd uintptr) bool {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(p, 0)
	return err == nil && n > 0 && p[0].Revents&unix.POLLIN != 0
}
