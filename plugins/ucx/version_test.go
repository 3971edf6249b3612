package ucx_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/custody-dev/custody/plugins/ucx"
)

// TestRunsOnTheUCXItWasBuiltFor: the UCX library the tests load at run
// time is the version the build was configured with (make test passes
// pkg-config's as CUSTODY_UCX_VERSION, for Debian's UCX and for the
// registry's alike). A build against one UCX's headers that loads
// another's libraries (a lost rpath, an LD_LIBRARY_PATH) fails here
// instead of passing as a test of the wrong UCX.
func TestRunsOnTheUCXItWasBuiltFor(t *testing.T) {
	want := os.Getenv("CUSTODY_UCX_VERSION")
	if want == "" {
		t.Skip("CUSTODY_UCX_VERSION is not set (make test sets it from pkg-config)")
	}
	assert.Equal(t, want, ucx.UCXVersion(), "the UCX library loaded")
}
