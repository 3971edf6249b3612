package ring

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Where the CPU offers RDPID or RDTSCP, the CPU's number is read with it,
// not with a system call.
func TestCurrentCPUNeedsNoSystemCallWhereOffered(t *testing.T) {
	_, _, ecx7, _ := cpuid(7, 0)
	maxExt, _, _, _ := cpuid(0x80000000, 0)
	var edxExt uint32
	if maxExt >= 0x80000001 {
		_, _, _, edxExt = cpuid(0x80000001, 0)
	}
	if ecx7&(1<<22) == 0 && edxExt&(1<<27) == 0 {
		t.Skip("this CPU offers neither RDPID nor RDTSCP")
	}
	assert.NotNil(t, userCPU(), "a reader the CPU offers agrees with getcpu")
	_, _ = currentCPU()
	assert.NotEqual(t, reflect.ValueOf(getcpu).Pointer(), reflect.ValueOf(cpuRead).Pointer(), "currentCPU still reads the CPU with a system call")
}
