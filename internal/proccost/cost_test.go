package proccost

import (
	"bufio"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// startChild starts a shell that runs script and then stops itself
// (SIGSTOP), and returns once the kernel reported it stopped (wait4 with
// WUNTRACED): from then on it runs nothing, not even a system call, until
// the test's cleanup continues it and it ends.
func startChild(t *testing.T, script string) *exec.Cmd {
	t.Helper()
	child := exec.Command("sh", "-c", script+"; kill -STOP $$")
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Signal(unix.SIGCONT); _ = child.Wait() })
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(child.Process.Pid, &ws, unix.WUNTRACED, nil)
		if err == unix.EINTR {
			continue
		}
		require.NoError(t, err)
		break
	}
	require.True(t, ws.Stopped(), "the child ended (%v) instead of stopping", ws)
	return child
}

// Threads counts a process's CPU time and context switches, and Tree finds
// the processes below one.
func TestThreadsAndTree(t *testing.T) {
	child := startChild(t, "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done")
	kid, err := Threads(child.Process.Pid)
	require.NoError(t, err)
	assert.Positive(t, kid.CPU, "the child worked")
	assert.Positive(t, kid.Switches, "the child waited at least once")
	tree, err := Tree(os.Getpid())
	require.NoError(t, err)
	assert.Equal(t, os.Getpid(), tree[0])
	assert.Contains(t, tree, child.Process.Pid)
}

// A Meter counts the system calls a process makes in its window, those of
// the processes it starts meanwhile included, and none before it.
func TestMeterCountsSyscalls(t *testing.T) {
	// The child starts /bin/true 1000 times once told to, then waits again.
	child := exec.Command("sh", "-c", "read x; i=0; while [ $i -lt 1000 ]; do /bin/true; i=$((i+1)); done; echo done; read x")
	stdin, err := child.StdinPipe()
	require.NoError(t, err)
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	defer func() { _ = stdin.Close(); _ = child.Wait() }()

	m, err := Start(child.Process.Pid)
	require.NoError(t, err)
	if m.SyscallsErr != nil {
		t.Skipf("system calls cannot be counted here: %v", m.SyscallsErr)
	}
	_, err = stdin.Write([]byte("go\n"))
	require.NoError(t, err)
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "done\n", line)
	costs, err := m.Stop()
	require.NoError(t, err)
	require.Len(t, costs, 1)
	// strace -f -c counts 36 system calls per /bin/true of this loop: about
	// 8 in the shell (clone, wait4, signal masks) and the rest in the child
	// (exec, the loader's mmaps). Above 20 per iteration, the children's
	// own calls were counted: the counter was inherited.
	t.Logf("%d system calls", costs[0].Syscalls)
	assert.Greater(t, costs[0].Syscalls, int64(20000), "the forks, execs and the children's own calls")
	assert.Less(t, costs[0].Syscalls, int64(60000), "about 36 per iteration")
	assert.Positive(t, costs[0].CPU)
}

// A Meter's window holds only what happened in it: an idle process counts
// (about) nothing.
func TestMeterIdleProcess(t *testing.T) {
	child := startChild(t, "true")
	m, err := Start(child.Process.Pid)
	require.NoError(t, err)
	costs, err := m.Stop()
	require.NoError(t, err)
	assert.Zero(t, costs[0].CPU, "a stopped process runs no instruction")
	assert.Zero(t, costs[0].Syscalls)
}
