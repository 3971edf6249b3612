package ucx_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/sdk/plugin"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// pluginBinary returns the path of custody-transport-ucx:
// $CUSTODY_UCX_PLUGIN when set (CI builds it once), else one built here.
func pluginBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("CUSTODY_UCX_PLUGIN"); p != "" {
		return p
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "custody-ucx-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "custody-transport-ucx")
		out, err := exec.Command("go", "build", "-o", buildPath, "github.com/custody-dev/custody/plugins/ucx/cmd/custody-transport-ucx").CombinedOutput()
		if err != nil {
			buildErr = &buildError{err: err, out: string(out)}
		}
	})
	require.NoError(t, buildErr, "build custody-transport-ucx")
	return buildPath
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

// TestConformancePlugin holds the plugin binary, one process per agent,
// to every check, peer loss included, over tcp and over shared memory.
func TestConformancePlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("launches dozens of plugin processes")
	}
	path := pluginBinary(t)
	for _, tls := range tlsSettings {
		t.Run(tls, func(t *testing.T) {
			// The plugin's Describe runs before Open: it reads $UCX_TLS.
			t.Setenv("UCX_TLS", tls)
			conformance.Run(t, conformance.Config{
				New:    conformance.PluginFactory(path, plugin.LaunchOptions{}),
				Params: map[string]string{"tls": tls},
			})
		})
	}
}
