package kit

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProcAlive(t *testing.T) {
	self, err := SelfProc()
	require.NoError(t, err)
	assert.True(t, self.Alive(), "this process lives")
	assert.False(t, Proc{Pid: self.Pid, Start: self.Start + 1}.Alive(), "another start time is another process (pid reused)")

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	require.NoError(t, cmd.Start())
	child := Proc{Pid: uint32(cmd.Process.Pid)}
	child.Start, _, err = ProcStat(cmd.Process.Pid)
	require.NoError(t, err)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait() // reaped: gone from /proc
	assert.False(t, child.Alive(), "a killed and reaped process is dead")
}

func TestWatchProc(t *testing.T) {
	start := func(t *testing.T) (*exec.Cmd, Proc) {
		cmd := exec.Command("sleep", "60")
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		p := Proc{Pid: uint32(cmd.Process.Pid)}
		var err error
		p.Start, _, err = ProcStat(cmd.Process.Pid)
		require.NoError(t, err)
		return cmd, p
	}
	t.Run("reports an exit", func(t *testing.T) {
		cmd, p := start(t)
		dead := make(chan struct{})
		w, err := WatchProc(p, func() { close(dead) })
		require.NoError(t, err)
		select {
		case <-dead:
			t.Fatal("reported dead while it runs")
		default:
		}
		require.NoError(t, cmd.Process.Kill())
		<-dead // the test's deadline bounds this wait
		w.Stop()
		w.Wait()
	})
	t.Run("stop ends the watch without a report", func(t *testing.T) {
		cmd, p := start(t)
		w, err := WatchProc(p, func() { t.Error("reported dead after stop") })
		require.NoError(t, err)
		w.Stop()
		w.Wait()
		require.NoError(t, cmd.Process.Kill())
	})
	t.Run("a gone process is refused", func(t *testing.T) {
		cmd, p := start(t)
		require.NoError(t, cmd.Process.Kill())
		_ = cmd.Wait()
		_, err := WatchProc(p, func() {})
		assert.ErrorIs(t, err, ErrProcGone)
	})
	t.Run("a reused pid is refused", func(t *testing.T) {
		_, p := start(t)
		p.Start++ // another process than the one the metadata named
		_, err := WatchProc(p, func() {})
		assert.ErrorIs(t, err, ErrProcGone)
	})
}
