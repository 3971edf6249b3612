package bench

import (
	"bufio"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// treeCost counts the processes below pid too, and threadsCost the CPU
// time and context switches of a process's threads.
func TestTreeCostCountsChildren(t *testing.T) {
	// A child that works a while, says so, then waits on its stdin.
	child := exec.Command("sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo worked; read x")
	stdin, err := child.StdinPipe()
	require.NoError(t, err)
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	defer func() { _ = stdin.Close(); _ = child.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "worked\n", line)

	kid, err := threadsCost(child.Process.Pid)
	require.NoError(t, err)
	assert.Positive(t, kid.cpu, "the child worked")
	assert.Positive(t, kid.switches, "the child waited at least once")
	total, own, err := treeCost(os.Getpid())
	require.NoError(t, err)
	assert.Positive(t, own.cpu)
	assert.GreaterOrEqual(t, total.cpu-own.cpu, kid.cpu, "the tree holds the child's CPU time")
	assert.GreaterOrEqual(t, total.switches-own.switches, kid.switches, "the tree holds the child's switches")
}
