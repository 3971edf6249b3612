package heapfloor

import (
	"runtime"
	"runtime/metrics"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFromEnv(t *testing.T) {
	t.Setenv(Env, "")
	n, err := FromEnv()
	require.NoError(t, err)
	assert.Equal(t, DefaultMiB, n, "unset: the default")
	for v, want := range map[string]int{"0": 0, "16": 16, "16384": 16384} {
		t.Setenv(Env, v)
		n, err := FromEnv()
		require.NoError(t, err, v)
		assert.Equal(t, want, n, v)
	}
	for _, v := range []string{"x", "-1", "16385", "1.5", "32MiB"} {
		t.Setenv(Env, v)
		_, err := FromEnv()
		require.Error(t, err, v)
		assert.ErrorContains(t, err, Env+`="`+v+`"`, "the error names the variable and its value")
	}
}

// Keep raises the collector's goal by twice the floor; Keep(0) drops it.
// (That the floor's pages are not resident is checked on a transport
// process, sdk/plugin's TestServeKeepsAHeapFloor: a floor allocated again
// in one process may reuse memory the runtime zeroes.)
func TestKeepRaisesTheGoal(t *testing.T) {
	defer Keep(0)
	runtime.GC()
	goal0 := heapGoal()
	Keep(256)
	runtime.GC()
	assert.GreaterOrEqual(t, heapGoal(), goal0+2*256<<20-8<<20, "the goal counts the floor as live heap")
	Keep(0)
	runtime.GC()
	assert.Less(t, heapGoal(), goal0+64<<20, "Keep(0) drops the floor")
}

func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
