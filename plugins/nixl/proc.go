package nixl

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

// procID names a process across pid reuse: its pid and its start time in
// clock ticks since boot (field 22 of /proc/PID/stat). Metadata carries the
// agent's procID so that a peer on the same host can watch it.
type procID struct {
	Pid   uint32
	Start uint64
}

// selfProc is this process's procID.
func selfProc() (procID, error) {
	pid := os.Getpid()
	start, _, err := procStat(pid)
	if err != nil {
		return procID{}, err
	}
	return procID{Pid: uint32(pid), Start: start}, nil
}

// alive reports whether the process still runs: it exists, has the same
// start time (so its pid was not reused) and is not a zombie.
func (p procID) alive() bool {
	start, state, err := procStat(int(p.Pid))
	if err != nil {
		// Only a missing process is dead; any other failure to read
		// /proc (a transient error) must not end this one.
		return !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ESRCH)
	}
	return start == p.Start && state != 'Z' && state != 'X'
}

// procStat reads a process's start time and state from /proc.
func procStat(pid int) (start uint64, state byte, err error) {
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

// procWatch waits, on a pidfd in Go's poller, for one process to exit: no
// timer and no CPU while it lives.
type procWatch struct {
	f    *os.File
	done chan struct{}
}

// errProcGone is a watched process that is already gone.
var errProcGone = errors.New("process is gone")

// watchProc calls dead once p exits, unless stop is called first. It
// fails with errProcGone when p is no longer running (its pid may have
// been reused: the start time is checked once the pidfd pins the pid).
func watchProc(p procID, dead func()) (*procWatch, error) {
	fd, err := pidfdOpen(int(p.Pid))
	if errors.Is(err, syscall.ESRCH) {
		return nil, errProcGone
	}
	if err != nil {
		return nil, fmt.Errorf("pidfd_open(%d): %w", p.Pid, err)
	}
	if !p.alive() {
		_ = syscall.Close(fd)
		return nil, errProcGone
	}
	f := os.NewFile(uintptr(fd), fmt.Sprintf("pidfd:%d", p.Pid))
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("pidfd of %d: %w", p.Pid, err)
	}
	w := &procWatch{f: f, done: make(chan struct{})}
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

// stop ends the watch (dead is not called after it returns, unless it
// already runs); wait waits for its goroutine.
func (w *procWatch) stop() { _ = w.f.Close() }

func (w *procWatch) wait() { <-w.done }

// pidfdOpen returns a non-blocking pidfd of pid.
func pidfdOpen(pid int) (int, error) { return unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK) }

// pidfdExited reports whether the process of pidfd fd has exited (the
// pidfd is readable).
func pidfdExited(fd uintptr) bool {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(p, 0)
	return err == nil && n > 0 && p[0].Revents&unix.POLLIN != 0
}
