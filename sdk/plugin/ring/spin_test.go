package ring

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A spinner looks up whether it shares its peer's CPU (a system call) on
// its first round, then at most once every cpuCheck, and answers the last
// look in between.
func TestSpinnerLooksAtMostEveryCPUCheck(t *testing.T) {
	var sp spinner
	looks, answer := 0, true
	look := func() bool { looks++; return answer }
	t0 := time.Unix(1, 0)
	assert.True(t, sp.sameCPU(t0, look))
	assert.Equal(t, 1, looks, "the first round looks")
	answer = false
	for _, d := range []time.Duration{0, time.Microsecond, cpuCheck - 1} {
		assert.True(t, sp.sameCPU(t0.Add(d), look), "the last look's answer, %v after it", d)
	}
	assert.Equal(t, 1, looks, "no look within cpuCheck")
	assert.False(t, sp.sameCPU(t0.Add(cpuCheck), look), "a new look once the last is cpuCheck old")
	assert.Equal(t, 2, looks)
	assert.False(t, sp.sameCPU(t0.Add(cpuCheck+time.Microsecond), look))
	assert.Equal(t, 2, looks)
}
