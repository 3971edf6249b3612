//go:build !nixl

package nixl

import "testing"

// TestNIXL stands for the NIXL tests when the package is built without
// NIXL, so that a run says why they did not run.
func TestNIXL(t *testing.T) {
	t.Skip("NIXL transport not built: build with -tags nixl against an installed NIXL (make build NIXL_PREFIX=/path/to/nixl, see docs/nixl.md)")
}
