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

func TestWatchProc(t *testing.T) {
	start := func(t *testing.T) (*exec.Cmd, procID) {
		cmd := exec.Command("sleep", "60")
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		p := procID{Pid: uint32(cmd.Process.Pid)}
		var err error
		p.Start, _, err = procStat(cmd.Process.Pid)
		require.NoError(t, err)
		return cmd, p
	}
	t.Run("reports an exit", func(t *testing.T) {
		cmd, p := start(t)
		dead := make(chan struct{})
		w, err := watchProc(p, func() { close(dead) })
		require.NoError(t, err)
		select {
		case <-dead:
			t.Fatal("reported dead while it runs")
		default:
		}
		require.NoError(t, cmd.Process.Kill())
		<-dead // the test's deadline bounds this wait
		w.stop()
		w.wait()
	})
	t.Run("stop ends the watch without a report", func(t *testing.T) {
		cmd, p := start(t)
		w, err := watchProc(p, func() { t.Error("reported dead after stop") })
		require.NoError(t, err)
		w.stop()
		w.wait()
		require.NoError(t, cmd.Process.Kill())
	})
	t.Run("a gone process is refused", func(t *testing.T) {
		cmd, p := start(t)
		require.NoError(t, cmd.Process.Kill())
		_ = cmd.Wait()
		_, err := watchProc(p, func() {})
		assert.ErrorIs(t, err, errProcGone)
	})
	t.Run("a reused pid is refused", func(t *testing.T) {
		_, p := start(t)
		p.Start++ // another process than the one the metadata named
		_, err := watchProc(p, func() {})
		assert.ErrorIs(t, err, errProcGone)
	})
}
