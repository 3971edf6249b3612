package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/custody-dev/custody/internal/drive"
	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
	"github.com/custody-dev/custody/sdk/plugin/agent"
)

// RegionBytes is each agent's region in the bandwidth benchmarks; posts in
// flight at one size use distinct slots of it.
const RegionBytes = 64 << 20

// maxDepth bounds the posts in flight per batch; a batch is at most
// RegionBytes.
const maxDepth = 1024

// pollPause is the first pause between two Poll rounds of a group; the
// pause doubles up to a 32nd of the group's last time.
const pollPause = 50 * time.Microsecond

// maxDoublings bounds the doublings of the pause (it stops growing long
// before, at its cap).
const maxDoublings = 20

// startPair launches two agents of the transport at path, each its own
// process with a region of RegionBytes, A to move data to and from B.
func startPair(ctx context.Context, path string, params map[string]string, prefix string) (*agent.Pair, error) {
	return agent.NewPair(ctx, agent.Launch(path, plugin.LaunchOptions{}), prefix, params, agent.Dir(), RegionBytes)
}

// measure runs batches of depth posts of one size-byte descriptor each,
// settles each batch and posts it again, until minTime has passed, and
// returns depth and the bandwidth in MiB/s. Two groups of depth/2 posts
// alternate, so that one group's transfers run while the other's are
// polled, released and posted again: gRPC costs three calls and a few
// polls per group, not per transfer.
func measure(ctx context.Context, p *agent.Pair, op sdk.Op, size int, minTime time.Duration) (depth int, mibps float64, err error) {
	a := p.A
	depth = min(maxDepth, RegionBytes/size)
	lists, err := drive.Prepare(ctx, a, a.Region.Blocks(depth, uint64(size)), p.B.Region.Blocks(depth, uint64(size)))
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = lists.Release(ctx, a) }()
	specs := lists.Singles(op, depth)
	half := max(1, depth/2)
	groups := [][]sdk.PostSpec{specs[:half], specs[half:]}
	if len(groups[1]) == 0 {
		groups = groups[:1]
	}
	// settle waits for a group, pausing between polls (so that polling
	// leaves the CPU to the transfers) by a pause that grows from
	// pollPause to a 32nd of the group's last time.
	var last time.Duration
	settle := func(ids []sdk.HandleID, posted time.Time) error {
		ceiling := max(pollPause, last/32)
		done, err := drive.Settle(ctx, a.Transport, ids, func(round int) error {
			time.Sleep(min(pollPause<<min(round, maxDoublings), ceiling))
			return nil
		})
		last = done.Sub(posted)
		return err
	}
	run := func(rounds int, minTime time.Duration) (int, time.Duration, error) {
		inflight := make([][]sdk.HandleID, len(groups))
		postedAt := make([]time.Time, len(groups))
		for g := range groups {
			var err error
			if inflight[g], err = drive.Post(ctx, a.Transport, groups[g]); err != nil {
				return 0, 0, err
			}
			postedAt[g] = time.Now()
		}
		start := time.Now()
		done := 0
		for g := 0; ; g = (g + 1) % len(groups) {
			if err := settle(inflight[g], postedAt[g]); err != nil {
				return 0, 0, err
			}
			done += len(groups[g])
			if done >= rounds*depth && time.Since(start) >= minTime {
				for k := 1; k < len(groups); k++ { // drain the other groups
					o := (g + k) % len(groups)
					if err := settle(inflight[o], postedAt[o]); err != nil {
						return 0, 0, err
					}
					done += len(groups[o])
				}
				return done, time.Since(start), nil
			}
			var err error
			if inflight[g], err = drive.Post(ctx, a.Transport, groups[g]); err != nil {
				return 0, 0, err
			}
			postedAt[g] = time.Now()
		}
	}
	if _, _, err := run(1, 0); err != nil { // warm up: connect, fault pages in
		return 0, 0, fmt.Errorf("%v %d B: %w", op, size, err)
	}
	n, el, err := run(4, minTime)
	if err != nil {
		return 0, 0, fmt.Errorf("%v %d B: %w", op, size, err)
	}
	return depth, float64(n*size) / el.Seconds() / (1 << 20), nil
}
