package host

import (
	"path/filepath"
	"testing"

	"github.com/custody-dev/custody/internal/testbin"
)

// fakePlugin is the fake transport binary the end-to-end tests run as a
// real plugin process, built once by TestMain.
var fakePlugin string

func TestMain(m *testing.M) {
	testbin.Main(m, func(dir string) { fakePlugin = filepath.Join(dir, "custody-transport-fake") }, "custody-transport-fake")
}
