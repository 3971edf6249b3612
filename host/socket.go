package host

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// engineListener is the engine API's unix socket. The socket file is created
// with mode 0600; every accepted connection is refused when the file's mode
// has been loosened since, when it is no longer this process's socket, or
// when the client runs as another user (SO_PEERCRED).
type engineListener struct {
	*net.UnixListener
	path string
	log  hclog.Logger
}

// listenEngine creates the socket at path, replacing a stale socket file left
// by a dead host, but never any other kind of file.
func listenEngine(path string, log hclog.Logger) (*engineListener, error) {
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
	return &engineListener{UnixListener: ln, path: path, log: log}, nil
}

// Accept returns the next connection that passes the checks; refused ones
// are closed and logged.
func (l *engineListener) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		if err := l.check(c); err != nil {
			l.log.Error("engine connection refused", "failure_type", "engine_socket_refused", "error", err.Error())
			c.Close()
			continue
		}
		return c, nil
	}
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
