package plugin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-plugin"
)

// Each launched process gets a private directory (0700) for its go-plugin
// socket: the process creates the socket there, and the host removes the
// whole directory once the process is gone (Kill, Stop, or a launch that
// failed), so a killed transport, which cannot clean up after itself,
// leaves nothing behind. The directory is made under
// LaunchOptions.SocketDir, or the temp directory; a host that passes its
// own SocketDir removes what a previous host left there at its next start
// (RemoveStaleSocketDirs).

// socketDirPattern names a process's socket directory.
const socketDirPattern = "custody-transport-*"

// attachSocketDir makes the process's socket directory under parent and
// tells the process (and go-plugin) to use it.
func attachSocketDir(cmd *exec.Cmd, parent string) (string, error) {
	dir, err := os.MkdirTemp(parent, socketDirPattern)
	if err != nil {
		return "", fmt.Errorf("socket directory: %w", err)
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, plugin.EnvUnixSocketDir+"="+dir)
	return dir, nil
}

// RemoveStaleSocketDirs removes every socket directory under parent. Call
// it only when no process launched with that SocketDir lives, such as at
// the start of the only host that uses parent.
func RemoveStaleSocketDirs(parent string) error {
	entries, err := os.ReadDir(parent)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	prefix := strings.TrimSuffix(socketDirPattern, "*")
	var errs []error
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), prefix) {
			if err := os.RemoveAll(filepath.Join(parent, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("remove stale socket directories in %s: %v", parent, errs)
	}
	return nil
}
