package drive

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/custody-dev/custody/internal/proccost"
	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin/agent"
)

// PullResult is what Pull measured.
type PullResult struct {
	// Pulls is the Post to DONE time of each measured pull.
	Pulls []time.Duration `json:"pulls"`
	// Cost is what this process used over the measured pulls, all of
	// them together; SyscallsErr says why Cost.Syscalls was not counted
	// ("" when it was).
	Cost        proccost.Cost `json:"cost"`
	SyscallsErr string        `json:"syscalls_err,omitempty"`
}

// Pull measures the transport itself: two agents of start in this process,
// opened with params, their regions of blockSize bytes in dir; a READ of
// one block is posted and polled in a loop until DONE, warmup times and
// then n times measured, with what this process used meanwhile.
func Pull(ctx context.Context, start agent.Start, params map[string]string, dir string, blockSize, n, warmup int) (res PullResult, err error) {
	p, err := agent.NewPair(ctx, start, "inproc", params, dir, uint64(blockSize))
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, p.Stop()) }()
	a, b := p.A, p.B
	lists, err := Prepare(ctx, a, a.Region.Blocks(1, uint64(blockSize)), b.Region.Blocks(1, uint64(blockSize)))
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, lists.Release(ctx, a)) }()
	specs := lists.Singles(sdk.OpRead, 1)
	if warmup > 0 {
		if _, err := Latencies(ctx, a.Transport, specs, 0, warmup, 0, nil); err != nil {
			return res, err
		}
	}
	m, err := proccost.Start(os.Getpid())
	if err != nil {
		return res, err
	}
	if m.SyscallsErr != nil {
		res.SyscallsErr = m.SyscallsErr.Error()
	}
	if res.Pulls, err = Latencies(ctx, a.Transport, specs, 0, n, 0, nil); err != nil {
		return res, err
	}
	costs, err := m.Stop()
	if err != nil {
		return res, err
	}
	res.Cost = costs[0]
	return res, nil
}
