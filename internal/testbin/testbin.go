// Package testbin builds custody's binaries for tests that run them as real
// processes: the custody command and the transport plugins.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// packages maps each binary to the package that builds it.
var packages = map[string]string{
	"custody":                "github.com/custody-dev/custody/cmd/host",
	"custody-bench-ref":      "github.com/custody-dev/custody/cmd/benchref",
	"custody-transport-fake": "github.com/custody-dev/custody/plugins/fake/cmd/custody-transport-fake",
	"custody-transport-ucx":  "github.com/custody-dev/custody/plugins/ucx/cmd/custody-transport-ucx",
	// The example transport, a template for authors (examples/memcopy).
	"custody-transport-memcopy": "github.com/custody-dev/custody/examples/memcopy/cmd/custody-transport-memcopy",
}

// EnvDir names a directory where the binaries are already built (make test
// sets it to ./bin after make build), so tests need not build them again.
const EnvDir = "CUSTODY_BIN"

// Build returns a directory holding the named binaries: $CUSTODY_BIN when it
// holds them all, else dir, into which they are built with go build.
func Build(dir string, names ...string) (string, error) {
	if env := os.Getenv(EnvDir); env != "" && haveAll(env, names) {
		return env, nil
	}
	for _, name := range names {
		pkg, ok := packages[name]
		if !ok {
			return "", fmt.Errorf("testbin: unknown binary %q", name)
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("testbin: build %s: %v\n%s", name, err, out)
		}
	}
	return dir, nil
}

func haveAll(dir string, names []string) bool {
	for _, n := range names {
		if st, err := os.Stat(filepath.Join(dir, n)); err != nil || st.IsDir() {
			return false
		}
	}
	return true
}

// Main is a TestMain for packages whose tests run the binaries: it builds
// names into a temporary directory, hands that directory to use, runs the
// tests, removes the directory, and fails the run if a goroutine outlived
// the tests (goleak).
func Main(m *testing.M, use func(dir string), names ...string) {
	tmp, err := os.MkdirTemp("", "custody-testbin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dir, err := Build(tmp, names...)
	if err != nil {
		os.RemoveAll(tmp)
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	use(dir)
	code := m.Run()
	os.RemoveAll(tmp)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
