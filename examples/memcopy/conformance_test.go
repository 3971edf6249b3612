package memcopy_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/examples/memcopy"
	"github.com/custody-dev/custody/internal/testbin"
	"github.com/custody-dev/custody/sdk/plugin"
)

// binDir holds the memcopy plugin binary, built by TestMain.
var binDir string

func TestMain(m *testing.M) {
	testbin.Main(m, func(dir string) { binDir = dir }, "custody-transport-memcopy")
}

// TestConformanceInProcess holds in-process memcopy agents to every check
// of the suite. They cannot be killed alone, so peer loss is checked by
// TestConformancePlugin.
func TestConformanceInProcess(t *testing.T) {
	conformance.Run(t, conformance.Config{New: func(context.Context) (conformance.Agent, error) {
		return conformance.Agent{Transport: memcopy.New()}, nil
	}})
}

// TestConformancePlugin holds the memcopy plugin binary, one process per
// agent, to every check, peer loss included: what `custody conformance
// --plugin bin/custody-transport-memcopy` runs.
func TestConformancePlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("launches dozens of plugin processes")
	}
	path := filepath.Join(binDir, "custody-transport-memcopy")
	conformance.Run(t, conformance.Config{New: conformance.PluginFactory(path, plugin.LaunchOptions{})})
}
