package core

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// A one-part request, the object core keeps per tracked handle of a
// homogeneous read, fits the 192-byte allocation class: with the handle
// and request indexes and the hold queue it keeps core at most 256 bytes
// per tracked handle (BenchmarkTrackedHandle measures the whole). A field
// added to request or xfer must be paid for elsewhere.
func TestRequestFitsItsClass(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(request1{}), uintptr(192), "request1 outgrew the 192-byte class")
}
