package ring

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
)

// currentCPU tells the CPU getcpu tells, on every CPU this process may
// run on, whichever way it reads it.
func TestCurrentCPUAgreesWithGetcpu(t *testing.T) {
	assert.True(t, agrees(currentCPU))
}

// A reader that disagrees with getcpu on any CPU is not taken.
func TestAReaderThatDisagreesIsRefused(t *testing.T) {
	assert.False(t, agrees(func() (uint32, bool) { return 4095, true }), "a CPU this machine does not have")
	if runtime.NumCPU() > 1 {
		assert.False(t, agrees(func() (uint32, bool) { return 0, true }), "CPU 0 wherever it runs")
	}
	assert.True(t, agrees(getcpu), "getcpu itself")
}
