//go:build nixl

package nixl_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// Under the race detector a Go program's exit runs the C libraries'
	// destructors, which a Go program's exit otherwise skips; the libnl
	// that UCX's InfiniBand module loads (libibverbs, bundled in NIXL's
	// wheel) crashes in its destructor then, after a run over tcp. No
	// test uses InfiniBand (there is no device here), so the test
	// process and the transports it starts load no ib module.
	if os.Getenv("UCX_MODULES") == "" {
		os.Setenv("UCX_MODULES", "^ib")
	}
	goleak.VerifyTestMain(m)
}
