//go:build !nixl

package nixl

import "testing"

// TestNIXL stands for the NIXL tests when the package is built without
// NIXL, so that a run says why they did not run.
func TestNIXL(t *testing.T) {
	t.Skip("NIXL transport not built: make test-nixl builds and tests it with -tags nixl against NIXL from the package registries, or NIXL_PREFIX (docs/nixl.md)")
}
