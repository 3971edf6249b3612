package bench

import (
	"context"

	"github.com/custody-dev/custody/sdk/plugin"
)

// TransportName is the name the transport binary at path gives itself in
// its Describe, which a launched plugin answers before Open.
func TransportName(ctx context.Context, path string) (string, error) {
	p, err := plugin.Launch(ctx, path, plugin.LaunchOptions{})
	if err != nil {
		return "", err
	}
	defer p.Stop()
	return p.Description().Name, nil
}
