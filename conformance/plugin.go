package conformance

import (
	"context"

	"github.com/custody-dev/custody/sdk/plugin"
)

// PluginFactory returns a Factory that launches the transport binary at
// path (built with plugin.Serve) once per agent, so that each agent is its own
// process: remote operations cross processes, and the peer-loss checks can
// kill one agent alone.
func PluginFactory(path string, opts plugin.LaunchOptions) Factory {
	return func(ctx context.Context) (Agent, error) {
		p, err := plugin.Launch(ctx, path, opts)
		if err != nil {
			return Agent{}, err
		}
		return Agent{Transport: p, Kill: p.Kill, Exited: p.Exited(), Stop: p.Stop}, nil
	}
}
