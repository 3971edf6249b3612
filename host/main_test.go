package host

import (
	"path/filepath"
	"testing"

	"github.com/custody-dev/custody/internal/testbin"
)

// fakePlugin is the fake transport binary the end-to-end tests run as a
// real plugin process, built once by TestMain.
var fakePlugin string

// custodyBin is the custody command, for tests that run hosts as processes.
var custodyBin string

func TestMain(m *testing.M) {
	testbin.Main(m, func(dir string) {
		fakePlugin = filepath.Join(dir, "custody-transport-fake")
		custodyBin = filepath.Join(dir, "custody")
	}, "custody-transport-fake", "custody")
}
