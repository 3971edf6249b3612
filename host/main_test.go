package host

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
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
	fakePlugin = filepath.Join(dir, "custody-transport-fake")
	build := exec.Command("go", "build", "-o", fakePlugin, "github.com/custody-dev/custody/plugins/fake/cmd/custody-transport-fake")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build the fake transport:", err)
		os.Exit(1)
	}
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
