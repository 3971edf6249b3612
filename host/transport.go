package host

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/hashicorp/go-hclog"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
)

// builtinTransports are the transports transport.name may name: the
// project builds custody-transport-NAME for each (nixl only where NIXL is
// installed).
var builtinTransports = []string{"fake", "ucx", "nixl"}

// PluginPath resolves the transport binary of a TransportConfig: its Path,
// else custody-transport-NAME next to the running executable, else on PATH.
func PluginPath(tc TransportConfig) (string, error) {
	if tc.Path != "" {
		return tc.Path, nil
	}
	bin := "custody-transport-" + tc.Name
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), bin)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath(bin)
	if err != nil {
		hint := "run make build or set transport.path"
		if tc.Name == "nixl" {
			hint = "make build builds it only where NIXL is installed (set NIXL_PREFIX; README, section NIXL), or set transport.path"
		}
		return "", fmt.Errorf("config: transport.name %q: %s is neither next to this binary nor on PATH; %s", tc.Name, bin, hint)
	}
	return p, nil
}

// startTransport launches the transport process and opens its agent. On any
// error the process is killed: nothing is left running.
func startTransport(ctx context.Context, tc TransportConfig, agent string, log hclog.Logger) (*plugin.Plugin, error) {
	path, err := PluginPath(tc)
	if err != nil {
		return nil, err
	}
	var sum []byte
	if tc.SHA256 != "" {
		sum, _ = hex.DecodeString(tc.SHA256) // validated at load
	}
	// ReleaseTerminal: core releases every handle once it is terminal; the
	// plugin does it as it reports the state, which saves a round trip
	// between the processes per transfer.
	pl, err := plugin.Launch(ctx, path, plugin.LaunchOptions{Checksum: sum, Logger: log, CallTimeout: tc.CallTimeout, SocketDir: tc.socketDir, ReleaseTerminal: true})
	if err != nil {
		return nil, err
	}
	if err := pl.Open(ctx, sdk.OpenRequest{Agent: agent, Params: tc.Params}); err != nil {
		_ = pl.Kill()
		return nil, fmt.Errorf("open transport %s as agent %q: %w", path, agent, err)
	}
	return pl, nil
}
