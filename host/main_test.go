package host

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/custody-dev/custody/internal/testbin"
)

// fakePlugin is the fake transport binary the end-to-end tests run as a
// real plugin process, built once by TestMain.
var fakePlugin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "custody-host-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin, err := testbin.Build(dir, "custody-transport-fake")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakePlugin = filepath.Join(bin, "custody-transport-fake")
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
