package host

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// engineListener is the engine API's unix socket. The socket file is created
// with mode 0600; every accepted connection is refused when the file's mode
// has been loosened since, when it is no longer this process's socket, or
// when the client runs as another user (SO_PEERCRED).
//
// It holds at most max connections open at once: one more is closed as it
// is accepted (a client of the right user can still open any number, but
// none past the cap holds a descriptor of the host's). The first refusal of
// a burst is logged, the rest counted only; a burst ends when a connection
// is accepted again.
type engineListener struct {
	*net.UnixListener
	path string
	log  hclog.Logger
	max  int
	// refused counts the connections refused at the cap; onRefuse, when
	// set before serving, is told of each.
	refused  atomic.Uint64
	onRefuse func()

	mu    sync.Mutex
	open  int  // connections accepted and not yet closed
	burst bool // a refusal at the cap was logged since the last accept
}

// listenEngine creates the socket at path, replacing a stale socket file left
// by a dead host, but never any other kind of file; it holds at most max
// connections open at once.
func listenEngine(path string, limit int, log hclog.Logger) (*engineListener, error) {
	if limit < 1 {
		return nil, fmt.Errorf("engine socket %s: max connections %d: want at least 1", path, limit)
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("engine socket %s: a file that is not a socket is in the way", path)
		}
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("engine socket %s: another host is serving it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("engine socket %s: remove stale socket: %w", path, err)
		}
	}
	old := syscall.Umask(0o177) // the socket is born 0600: no window with looser bits
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("engine socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("engine socket %s: %w", path, err)
	}
	return &engineListener{UnixListener: ln, path: path, log: log, max: limit}, nil
}

// Accept returns the next connection that passes the checks and fits under
// the cap; refused ones are closed and logged.
func (l *engineListener) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		if !l.admit() {
			l.refuse(c)
			continue
		}
		if err := l.check(c); err != nil {
			l.release()
			l.log.Error("engine connection refused", "failure_type", "engine_socket_refused", "error", err.Error())
			c.Close()
			continue
		}
		return &engineConn{UnixConn: c, release: l.release}, nil
	}
}

// admit counts a new connection in, unless max are open.
func (l *engineListener) admit() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open >= l.max {
		return false
	}
	l.open++
	l.burst = false
	return true
}

// release counts a connection out.
func (l *engineListener) release() {
	l.mu.Lock()
	l.open--
	l.mu.Unlock()
}

// refuse closes a connection past the cap, counting it and logging the
// first of a burst.
func (l *engineListener) refuse(c *net.UnixConn) {
	l.refused.Add(1)
	if l.onRefuse != nil {
		l.onRefuse()
	}
	l.mu.Lock()
	first := !l.burst
	l.burst = true
	l.mu.Unlock()
	if first {
		l.log.Warn("engine connection refused: engine.max_connections are open; more are refused, counted but not logged, until one is accepted again",
			"failure_type", "engine_connection_cap", "max_connections", l.max,
			"hint", "close idle engine clients, or raise engine.max_connections")
	}
	c.Close()
}

// engineConn is an accepted engine connection; closing it (once) makes room
// under the cap.
type engineConn struct {
	*net.UnixConn
	once    sync.Once
	release func()
}

func (c *engineConn) Close() error {
	c.once.Do(c.release)
	return c.UnixConn.Close()
}

// check refuses a connection unless the socket is still 0600 and ours and
// the client runs as our user.
func (l *engineListener) check(c *net.UnixConn) error {
	st, err := os.Lstat(l.path)
	if err != nil {
		return fmt.Errorf("engine socket %s: %w", l.path, err)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("engine socket %s has mode %#o, looser than 0600; restore it with chmod 600 or restart the host", l.path, perm)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok || int(sys.Uid) != os.Getuid() {
		return fmt.Errorf("engine socket %s is not owned by this host's user", l.path)
	}
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("engine socket: peer credentials: %w", cerr)
	}
	if int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("engine client pid %d runs as uid %d, not this host's uid %d", cred.Pid, cred.Uid, os.Getuid())
	}
	return nil
}

// Close closes the listener and removes the socket file.
func (l *engineListener) Close() error {
	err := l.UnixListener.Close()
	if rerr := os.Remove(l.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return err
}
