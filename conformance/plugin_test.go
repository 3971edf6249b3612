package conformance_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/sdk"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// fakePlugin returns the path of the fake transport binary:
// $CUSTODY_FAKE_PLUGIN when set (CI builds it once with make build), else
// one built here for this test binary's run.
func fakePlugin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CUSTODY_FAKE_PLUGIN"); p != "" {
		return p
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "custody-conformance-bin-")
		if buildErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", buildDir, "github.com/custody-dev/custody/plugins/fake/cmd/custody-transport-fake").CombinedOutput()
		if err != nil {
			buildErr = &buildError{err: err, out: string(out)}
		}
	})
	require.NoError(t, buildErr, "build the fake transport binary")
	return filepath.Join(buildDir, "custody-transport-fake")
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

// TestFakeOutOfProcess holds the fake, run as a plugin process per agent
// through sdk.Launch, to every check, peer loss included.
func TestFakeOutOfProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("launches dozens of plugin processes")
	}
	conformance.Run(t, conformance.Config{New: conformance.PluginFactory(fakePlugin(t), sdk.LaunchOptions{})})
}
