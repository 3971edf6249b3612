package conformance_test

import (
	"path/filepath"
	"testing"

	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/sdk/plugin"
)

// binDir holds the fake transport binary, built by TestMain.
var binDir string

// fakePlugin returns the path of the fake transport binary.
func fakePlugin(t *testing.T) string {
	t.Helper()
	return filepath.Join(binDir, "custody-transport-fake")
}

// TestFakeOutOfProcess holds the fake, run as a plugin process per agent
// through plugin.Launch, to every check, peer loss included: once with
// Post, Release and completions through the shared-memory rings, once over
// gRPC alone.
func TestFakeOutOfProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("launches dozens of plugin processes")
	}
	for _, tc := range []struct {
		name   string
		off    bool
		repeat int
	}{
		{"rings", false, 0},
		// The rings run holds every rule at the default repeat; this one
		// proves the gRPC path carries each call, at a fifth the count
		// to keep CI short.
		{"grpc", true, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conformance.Run(t, conformance.Config{New: conformance.PluginFactory(fakePlugin(t), plugin.LaunchOptions{DisableRings: tc.off}), Repeat: tc.repeat})
		})
	}
}
