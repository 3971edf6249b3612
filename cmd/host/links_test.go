package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCustodyLinksNoTransport: the custody command runs every transport as
// a process of its own and links none of them, so that a host needs none
// of their libraries (the UCX transport's libucx) installed; the in-process
// references of its benchmarks run in custody-bench-ref.
func TestCustodyLinksNoTransport(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/custody-dev/custody/cmd/host").CombinedOutput()
	require.NoError(t, err, string(out))
	for _, pkg := range strings.Fields(string(out)) {
		assert.False(t, strings.HasPrefix(pkg, "github.com/custody-dev/custody/plugins/"), "custody links %s", pkg)
	}
}
