package fake

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// A peer's metadata names files (its regions and lease files) and a
// notification socket. A forged peer could name any file of this user, so
// the fake acts only on paths its own configuration allows: files within
// the directories of the peer_dirs parameter (default: its dir and
// /dev/shm), after symbolic links are resolved, and notification sockets
// in the abstract namespace the fake itself uses. LoadPeers checks the
// paths first, for a clear refusal, and every file it opens again once
// opened (openPeerFile), where a link swapped in meanwhile cannot escape.

// shmDir is where regions in RAM live.
const shmDir = "/dev/shm"

// notifyPrefix opens every fake's notification socket name, incomingPrefix
// every incoming socket's (incoming.go).
const (
	notifyPrefix   = "@custody-fake/"
	incomingPrefix = "@custody-fake-dma/"
)

// defaultPeerDirs are the directories peers' files may lie in unless
// peer_dirs says otherwise.
func defaultPeerDirs(dir string) []string {
	return []string{dir, shmDir}
}

// parsePeerDirs parses peer_dirs: absolute directories separated by ':'.
func parsePeerDirs(v string) ([]string, error) {
	var out []string
	for _, d := range strings.Split(v, ":") {
		if d == "" {
			continue
		}
		if !filepath.IsAbs(d) {
			return nil, fmt.Errorf("%q is not an absolute path", d)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("want absolute directories separated by ':'")
	}
	return out, nil
}

// checkPeerPaths refuses metadata that names a file outside the allowed
// directories or a socket outside the fake's namespace.
func checkPeerPaths(md metadata, dirs []string) error {
	if !strings.HasPrefix(md.Notify, notifyPrefix) {
		return fmt.Errorf("notification socket %.256q is not a fake's (%s...)", md.Notify, notifyPrefix)
	}
	if md.Incoming != "" && !strings.HasPrefix(md.Incoming, incomingPrefix) {
		return fmt.Errorf("incoming socket %.256q is not a fake's (%s...)", md.Incoming, incomingPrefix)
	}
	if err := allowedPath("life lease", md.Life, dirs); err != nil {
		return err
	}
	for _, r := range md.Regions {
		if err := allowedPath(fmt.Sprintf("region %d", r.ID), r.Path, dirs); err != nil {
			return err
		}
		if err := allowedPath(fmt.Sprintf("region %d lease", r.ID), r.Lease, dirs); err != nil {
			return err
		}
	}
	return nil
}

// allowedPath reports whether path, its links resolved, lies within one of
// dirs (their links resolved too).
func allowedPath(what, path string, dirs []string) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		if os.IsNotExist(err) {
			real = filepath.Clean(path) // gone: nothing will open it; the check below still applies
		} else {
			return fmt.Errorf("%s %.256q: %v", what, path, err)
		}
	}
	return within(what, path, real, dirs)
}

// errNotAllowed: what a peer's metadata named, once opened, is not a
// regular file within the allowed directories.
var errNotAllowed = errors.New("not a file this agent may open for peers")

// openPeerFile opens a file a peer's metadata names, with flag, and keeps
// it only if what was opened is a regular file within dirs (else an error
// matching errNotAllowed). The kernel resolved the path's links as it
// opened it, so a link swapped in after checkPeerPaths looked cannot lead
// elsewhere; O_NONBLOCK keeps a FIFO swapped in from blocking the open.
func openPeerFile(what, path string, flag int, dirs []string) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s %.256q is not a regular file (%v): %w", what, path, st.Mode().Type(), errNotAllowed)
	}
	if err == nil {
		var real string
		if real, err = os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd())); err == nil {
			if err = within(what, path, real, dirs); err != nil {
				err = fmt.Errorf("%w (opened as %.256q): %w", err, real, errNotAllowed)
			}
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// within reports whether real, path resolved, lies within one of dirs
// (their links resolved too).
func within(what, path, real string, dirs []string) error {
	for _, d := range dirs {
		rd, err := filepath.EvalSymlinks(d)
		if err != nil {
			continue
		}
		if rel, err := filepath.Rel(rd, real); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && rel != "." {
			return nil
		}
	}
	return fmt.Errorf("%s %.256q lies outside the directories this agent may open for peers (%s); set the peer_dirs parameter to allow another", what, path, strings.Join(dirs, ":"))
}
