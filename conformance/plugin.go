package conformance

import (
	"context"

	"github.com/custody-dev/custody/sdk/plugin"
)

// PluginFactory returns a Factory that launches the transport binary at
// path (built with plugin.Serve) once per agent, so that each agent is its own
// process: remote operations cross processes, and the peer-loss checks can
// kill one agent alone. The re-checks of terminal states reach the
// transport over gRPC, past the rings (Agent.PollTransport); under
// opts.ReleaseTerminal they cannot (the plugin released each handle at its
// first terminal state, so the transport holds no later one: the rings'
// record is its last word), and the suite is meant to run without it.
func PluginFactory(path string, opts plugin.LaunchOptions) Factory {
	return func(ctx context.Context) (Agent, error) {
		p, err := plugin.Launch(ctx, path, opts)
		if err != nil {
			return Agent{}, err
		}
		a := Agent{Transport: p, Kill: p.Kill, Exited: p.Exited(), Stop: p.Stop}
		if !opts.ReleaseTerminal {
			a.PollTransport = p.PollTransport
		}
		return a, nil
	}
}
