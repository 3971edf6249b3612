package ring

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Where the CPU offers RDPID or RDTSCP, the CPU's number is read with it,
// not with a system call.
func TestCurrentCPUNeedsNoSystemCallWhereOffered(t *testing.T) {
	if hasRDPID, hasRDTSCP := offered(); !hasRDPID && !hasRDTSCP {
		t.Skip("this CPU offers neither RDPID nor RDTSCP")
	}
	assert.NotNil(t, userCPU(), "a reader the CPU offers agrees with getcpu")
	_, _ = currentCPU()
	assert.NotEqual(t, reflect.ValueOf(getcpu).Pointer(), reflect.ValueOf(cpuRead).Pointer(), "currentCPU still reads the CPU with a system call")
}
