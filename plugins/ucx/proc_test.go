package ucx

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProcAlive(t *testing.T) {
	self, err := selfProc()
	require.NoError(t, err)
	assert.True(t, self.alive(), "this process lives")
	assert.False(t, procID{Pid: self.Pid, Start: self.Start + 1}.alive(), "another start time is another process (pid reused)")

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	require.NoError(t, cmd.Start())
	child := procID{Pid: uint32(cmd.Process.Pid)}
	child.Start, _, err = procStat(cmd.Process.Pid)
	require.NoError(t, err)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait() // reaped: gone from /proc
	assert.False(t, child.alive(), "a killed and reaped process is dead")
}
