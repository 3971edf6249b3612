package conformance_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/internal/testbin"
	"github.com/custody-dev/custody/sdk"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// fakePlugin returns the path of the fake transport binary, built once for
// this test binary's run (or found in $CUSTODY_BIN).
func fakePlugin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "custody-conformance-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildDir, buildErr = testbin.Build(dir, "custody-transport-fake")
	})
	require.NoError(t, buildErr, "build the fake transport binary")
	return filepath.Join(buildDir, "custody-transport-fake")
}

// TestFakeOutOfProcess holds the fake, run as a plugin process per agent
// through sdk.Launch, to every check, peer loss included.
func TestFakeOutOfProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("launches dozens of plugin processes")
	}
	conformance.Run(t, conformance.Config{New: conformance.PluginFactory(fakePlugin(t), sdk.LaunchOptions{})})
}
