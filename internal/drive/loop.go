package drive

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// Pace is called between two Poll rounds of Settle that left handles
// running, with the number of such rounds before it (0 first). It paces
// the polling (a pause, a yield) and may end the wait with an error.
type Pace func(round int) error

// Spin is the pace of a latency measurement: it only yields the
// processor, so that the transfer's own goroutines run.
func Spin(int) error {
	runtime.Gosched()
	return nil
}

// Post posts specs in one call and returns their handles, in order; an
// item the transport refused fails the whole (whatever it accepted is
// then the caller's to stop with the agent).
func Post(ctx context.Context, t sdk.Transport, specs []sdk.PostSpec) ([]sdk.HandleID, error) {
	res, err := t.Post(ctx, specs)
	if err != nil {
		return nil, fmt.Errorf("Post: %w", err)
	}
	ids := make([]sdk.HandleID, 0, len(res))
	for _, r := range res {
		if r.Err != nil {
			return nil, fmt.Errorf("Post: %w", r.Err)
		}
		ids = append(ids, r.ID)
	}
	return ids, nil
}

// Settle polls ids until every one is terminal, calling pace (nil: none)
// between rounds that left some running, then releases them all in one
// call. done is when the last of them was seen terminal, before the
// release. It fails on a poll error (the handles are then left as they
// are: a handle whose state is unknown may not be released), on a failed
// Release, and on a handle that ended other than DONE, named once all were
// released.
func Settle(ctx context.Context, t sdk.Transport, ids []sdk.HandleID, pace Pace) (done time.Time, err error) {
	pending := append([]sdk.HandleID(nil), ids...)
	var failed error
	for round := 0; ; round++ {
		sts, err := t.Poll(ctx, pending)
		if err != nil {
			return time.Time{}, fmt.Errorf("Poll: %w", err)
		}
		if len(sts) != len(pending) {
			return time.Time{}, fmt.Errorf("Poll: %d states for %d handles", len(sts), len(pending))
		}
		next := pending[:0]
		for i, st := range sts {
			switch {
			case st.Err != nil:
				return time.Time{}, fmt.Errorf("Poll: %w", st.Err)
			case st.State == sdk.StateDone:
			case st.State.Terminal():
				if failed == nil {
					failed = fmt.Errorf("handle %d ended %v: %v", pending[i], st.State, st.Reason)
				}
			default:
				next = append(next, pending[i])
			}
		}
		pending = next
		if len(pending) == 0 {
			break
		}
		if pace != nil {
			if err := pace(round); err != nil {
				return time.Time{}, err
			}
		}
	}
	done = time.Now()
	errs, err := t.Release(ctx, ids)
	if err == nil {
		err = errors.Join(errs...)
	}
	if err != nil {
		err = fmt.Errorf("Release: %w", err)
	}
	return done, errors.Join(failed, err)
}

// Latencies posts one transfer at a time, specs in turn, and settles it
// with pace; it returns the Post to DONE time of each after the first
// warmup, once it has n of them and minTime has passed.
func Latencies(ctx context.Context, t sdk.Transport, specs []sdk.PostSpec, warmup, n int, minTime time.Duration, pace Pace) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	start := time.Now()
	for i := 0; len(out) < n || time.Since(start) < minTime; i++ {
		t0 := time.Now()
		ids, err := Post(ctx, t, specs[i%len(specs):i%len(specs)+1])
		if err != nil {
			return nil, err
		}
		done, err := Settle(ctx, t, ids, pace)
		if err != nil {
			return nil, err
		}
		if i >= warmup {
			out = append(out, done.Sub(t0))
		}
	}
	return out, nil
}
