package agent

import (
	"context"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
)

// Start returns a fresh, unopened transport and what ends it once it is
// closed: a plugin process's Stop, or nothing for a transport in this
// process.
type Start func(ctx context.Context) (sdk.Transport, func(), error)

// Launch is a Start that launches the transport binary at path with opts,
// one process per agent.
func Launch(path string, opts plugin.LaunchOptions) Start {
	return func(ctx context.Context) (sdk.Transport, func(), error) {
		p, err := plugin.Launch(ctx, path, opts)
		if err != nil {
			return nil, nil, err
		}
		return p, p.Stop, nil
	}
}

// InProcess is a Start for a transport of this process that mk makes.
func InProcess(mk func() sdk.Transport) Start {
	return func(context.Context) (sdk.Transport, func(), error) { return mk(), func() {}, nil }
}
