package host

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/sdk/plugin"
)

// A transport could outlive its host if both of its death mechanisms (the
// parent death signal and the lifeline, sdk/plugin/lifeline.go) failed.
// So a host also leaves a record: each host name has a private state
// directory in which the host holds a lock for its whole life and records
// its running transport's pid and start time. A host that starts finds the
// record of the host before it and fences that transport (SIGKILL, then
// waits until it is gone) before it starts its own, so before it hands out
// any block. The start time (field 22 of /proc/PID/stat) tells a reused pid
// from the transport, so an unrelated process is never hit.

// orphanWait bounds the wait for a left-behind transport to die after
// SIGKILL.
const orphanWait = 10 * time.Second

// hostState is a host's private state directory, locked while it runs.
type hostState struct {
	dir     string // <state_dir>/hosts/<name>
	sockets string // where each transport's socket directory is made
	lock    *os.File
	log     hclog.Logger
}

// defaultStateDir is where hosts keep state when state_dir is not set:
// $XDG_RUNTIME_DIR/custody, else custody-<uid> in the temp directory.
func defaultStateDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "custody")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("custody-%d", os.Getuid()))
}

// privateDir creates dir (0700) when missing and refuses one that is not a
// directory, not this user's, or open to others: the state it holds
// decides which processes a host kills and whom it trusts.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state directory %s: %w", dir, err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("state directory %s: %w", dir, err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	switch {
	case !st.IsDir():
		return fmt.Errorf("state directory %s is not a directory (a symlink?); remove it or set state_dir", dir)
	case !ok || int(sys.Uid) != os.Getuid():
		return fmt.Errorf("state directory %s is not owned by this user (uid %d); set state_dir to a directory of your own", dir, os.Getuid())
	case st.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("state directory %s has mode %#o; it must be private: chmod 700 it", dir, st.Mode().Perm())
	}
	return nil
}

// openState locks the host's state directory and fences any transport a
// previous host of the same name left behind. It refuses to start while
// another live host of that name holds the lock.
func openState(cfg *Config, log hclog.Logger) (*hostState, error) {
	if err := privateDir(cfg.StateDir); err != nil {
		return nil, fmt.Errorf("config: state_dir: %w", err)
	}
	dir := filepath.Join(cfg.StateDir, "hosts", cfg.Name)
	if err := privateDir(filepath.Dir(dir)); err != nil {
		return nil, err
	}
	if err := privateDir(dir); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "host.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("host %q: state lock: %w", cfg.Name, err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("host %q: another host of this name runs with state directory %s; stop it, or give this host another name or state_dir", cfg.Name, cfg.StateDir)
		}
		return nil, fmt.Errorf("host %q: state lock: %w", cfg.Name, err)
	}
	s := &hostState{dir: dir, sockets: SocketParent(cfg.StateDir, cfg.Name), lock: lock, log: log}
	if err := s.fenceOrphan(); err != nil {
		s.close()
		return nil, err
	}
	// No transport of this host name lives now: what earlier ones left
	// (killed, they could not clean up) goes.
	if err := privateDir(s.sockets); err != nil {
		s.close()
		return nil, err
	}
	if err := plugin.RemoveStaleSocketDirs(s.sockets); err != nil {
		s.log.Warn("stale transport sockets remain", "failure_type", "stale_sockets", "error", err.Error())
	}
	return s, nil
}

// SocketParent is where the transports of host name with state directory
// stateDir make their socket directories: a private directory in the temp
// directory, named after the host's own state directory (unix socket paths
// must stay short, so not within it), the same at every start of the host.
// The host removes it when it stops; one killed leaves it, with its dead
// transports' socket directories, for its next start to clear, or for
// whoever gives up on that host to remove.
func SocketParent(stateDir, name string) string {
	sum := sha256.Sum256([]byte(filepath.Join(stateDir, "hosts", name)))
	return filepath.Join(os.TempDir(), fmt.Sprintf("custody-%d-%x", os.Getuid(), sum[:6]))
}

// transportConfig is tc with this host's socket directory.
func (s *hostState) transportConfig(tc TransportConfig) TransportConfig {
	tc.socketDir = s.sockets
	return tc
}

func (s *hostState) pidfile() string { return filepath.Join(s.dir, "transport.pid") }

// recordTransport records the running transport, so a host started after
// this one dies can fence it.
func (s *hostState) recordTransport(pid int) error {
	start, err := procStartTime(pid)
	if err != nil {
		return fmt.Errorf("record transport pid %d: %w", pid, err)
	}
	tmp := s.pidfile() + ".tmp"
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%d %d\n", pid, start), 0o600); err != nil {
		return fmt.Errorf("record transport pid %d: %w", pid, err)
	}
	if err := os.Rename(tmp, s.pidfile()); err != nil {
		return fmt.Errorf("record transport pid %d: %w", pid, err)
	}
	return nil
}

// fenceOrphan kills the transport the record names, when that process is
// still the one recorded, and waits until it is gone; then it removes the
// record.
func (s *hostState) fenceOrphan() error {
	raw, err := os.ReadFile(s.pidfile())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read transport record %s: %w", s.pidfile(), err)
	}
	var pid int
	var start uint64
	if _, err := fmt.Sscanf(string(raw), "%d %d", &pid, &start); err != nil || pid <= 0 {
		s.log.Warn("transport record is malformed; ignoring it", "failure_type", "orphan_record_malformed", "path", s.pidfile())
		return s.forget()
	}
	// The pidfd pins the process: once it is open, the pid cannot be
	// reused under it, so the start-time check and the kill hit one process.
	pidfd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return s.forget() // gone
	}
	if err != nil {
		return fmt.Errorf("fence left-behind transport pid %d: %w", pid, err)
	}
	defer unix.Close(pidfd)
	now, err := procStartTime(pid)
	if err != nil || now != start {
		return s.forget() // gone, or the pid now names another process
	}
	s.log.Error("a transport of a previous host is still running: fencing it", "failure_type", "orphan_transport_fenced", "pid", pid)
	if err := unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("fence left-behind transport pid %d: SIGKILL: %w; kill it by hand before starting this host", pid, err)
	}
	if !pidfdExited(pidfd, orphanWait) {
		return fmt.Errorf("fence left-behind transport pid %d: still alive %s after SIGKILL; it may still write into engine memory: not starting", pid, orphanWait)
	}
	return s.forget()
}

func (s *hostState) forget() error {
	if err := os.Remove(s.pidfile()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove transport record: %w", err)
	}
	return nil
}

// close removes the socket directory's parent when it is empty (the
// transport is gone) and releases the lock; the record stays for the next
// host to check.
func (s *hostState) close() {
	if s != nil && s.lock != nil {
		_ = os.Remove(s.sockets)
		s.lock.Close()
		s.lock = nil
	}
}

// pidfdExited waits up to within for the process behind pidfd to exit (a
// pidfd turns readable then, zombie or reaped).
func pidfdExited(pidfd int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		left := time.Until(deadline)
		if left < 0 {
			left = 0
		}
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left.Milliseconds()))
		if errors.Is(err, unix.EINTR) && left > 0 {
			continue
		}
		return err == nil && n > 0
	}
}

// procStartTime is the start time of process pid in clock ticks since boot
// (field 22 of /proc/PID/stat).
func procStartTime(pid int) (uint64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces and
	// parentheses itself: fields are counted after its last ')'.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(raw[i+1:]))
	const field = 22 - 3 // f[0] is field 3
	if len(f) <= field {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	return strconv.ParseUint(f[field], 10, 64)
}
