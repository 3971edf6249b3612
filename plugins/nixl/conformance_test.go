//go:build nixl

package nixl_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/plugins/nixl"
	"github.com/custody-dev/custody/sdk/plugin"
)

// settings are the UCX configurations the suite holds the transport to:
// TCP with UCX peer error handling (NIXL's default), and shared memory,
// which has no peer error handling in UCX (1.13 to 1.23). Shared memory is
// posix and sysv without cma: over cma NIXL's postXferReq copies a WRITE's
// bytes before it returns (doc.go).
var settings = []map[string]string{
	{"backend": "UCX", "tls": "tcp"},
	{"backend": "UCX", "tls": "posix,sysv", "ucx_error_handling_mode": "none"},
}

// TestConformanceInProcess holds in-process agents to the suite. They
// cannot be killed alone, so the peer-loss and fence checks skip here;
// TestConformancePlugin runs them. notifications/with-post runs only there
// too: NIXL sends a post's notification from getXferStatus once the
// transfer is done, so it leaves when the handle is next polled. The
// plugin's ring pump polls every running handle; the suite, in process,
// waits for the notification without polling the sender (doc.go).
func TestConformanceInProcess(t *testing.T) {
	for _, p := range settings {
		t.Run(p["tls"], func(t *testing.T) {
			t.Setenv("UCX_TLS", p["tls"])
			conformance.Run(t, conformance.Config{
				New: func(context.Context) (conformance.Agent, error) {
					return conformance.Agent{Transport: nixl.New()}, nil
				},
				Params: p,
				Match:  func(name string) bool { return name != "notifications/with-post" },
			})
		})
	}
}

// TestConformancePlugin holds the plugin binary, one process per agent,
// to every check, peer loss included.
func TestConformancePlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("launches dozens of plugin processes")
	}
	path := pluginBinary(t)
	for _, p := range settings {
		t.Run(p["tls"], func(t *testing.T) {
			t.Setenv("UCX_TLS", p["tls"])
			conformance.Run(t, conformance.Config{
				New:    conformance.PluginFactory(path, plugin.LaunchOptions{}),
				Params: p,
			})
		})
	}
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// pluginBinary returns custody-transport-nixl: $CUSTODY_BIN's when it has
// one (make test-nixl builds it), else one built here with the same cgo
// flags as this test.
func pluginBinary(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("CUSTODY_BIN"); d != "" {
		if p := filepath.Join(d, "custody-transport-nixl"); fileExists(p) {
			return p
		}
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "custody-nixl-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "custody-transport-nixl")
		out, err := exec.Command("go", "build", "-tags", "nixl", "-o", buildPath, "github.com/custody-dev/custody/plugins/nixl/cmd/custody-transport-nixl").CombinedOutput()
		if err != nil {
			buildErr = &buildError{err: err, out: string(out)}
		}
	})
	require.NoError(t, buildErr, "build custody-transport-nixl")
	return buildPath
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }
