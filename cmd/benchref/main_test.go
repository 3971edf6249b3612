package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/internal/drive"
	"github.com/custody-dev/custody/internal/heapfloor"
	"github.com/custody-dev/custody/internal/testbin"
)

// The references keep the heap floor a transport process keeps (plugin.
// Serve), from the same variable, so that they differ from the processes
// they are compared with by the process boundary alone; a floor that is
// not a number stops the program, naming the variable.
func TestReferenceKeepsTheTransportsHeapFloor(t *testing.T) {
	dir, err := testbin.Build(t.TempDir(), drive.ReferenceProgram)
	require.NoError(t, err)
	bin := filepath.Join(dir, drive.ReferenceProgram)
	// A floor of 4 GiB: more address space than the program maps without
	// one (about 1.7 GiB here), so that reaching it proves the floor.
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), heapfloor.Env+"=4096")
	in, err := cmd.StdinPipe() // the program waits for its request
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	assert.Eventually(t, func() bool { // the floor comes first, at start
		vm, err := testbin.StatusKiB(cmd.Process.Pid, "VmSize")
		require.NoError(t, err)
		return vm >= 4<<20
	}, 10*time.Second, time.Millisecond, "4 GiB of address space")
	require.NoError(t, in.Close())
	require.Error(t, cmd.Wait(), "no request: it exits saying so")

	cmd = exec.Command(bin)
	cmd.Env = append(os.Environ(), heapfloor.Env+"=lots")
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), heapfloor.Env+`="lots"`)
	assert.True(t, strings.HasPrefix(string(out), drive.ReferenceProgram+":"), "%s", out)
}
