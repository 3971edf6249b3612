package drive

import (
	"context"
	"errors"
	"time"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin/agent"
)

// Pull measures the transport itself: two agents of start in this process,
// opened with params, their regions of blockSize bytes in dir; a READ of
// one block is posted and polled in a loop until DONE, warmup times and
// then n times measured.
func Pull(ctx context.Context, start agent.Start, params map[string]string, dir string, blockSize, n, warmup int) (out []time.Duration, err error) {
	p, err := agent.NewPair(ctx, start, "inproc", params, dir, uint64(blockSize))
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, p.Stop()) }()
	a, b := p.A, p.B
	lists, err := Prepare(ctx, a, a.Region.Blocks(1, uint64(blockSize)), b.Region.Blocks(1, uint64(blockSize)))
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, lists.Release(ctx, a)) }()
	return Latencies(ctx, a.Transport, lists.Singles(sdk.OpRead, 1), warmup, n, 0, nil)
}
