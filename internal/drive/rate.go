package drive

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
)

// drainBound bounds the wait for the transfers still in flight once the
// rate is measured.
const drainBound = 30 * time.Second

// rate keeps len(specs) transfers in flight and counts completions per
// second: completions are taken from Events (EventSource) or Poll, waiting
// on Wake when the transport is a Waker and spinning otherwise; each batch
// is released and posted again, one call each.
func rate(ctx context.Context, t sdk.Transport, specs []sdk.PostSpec, minTime time.Duration) (float64, error) {
	es, hasEvents := t.(sdk.EventSource)
	if p, ok := t.(*plugin.Plugin); ok {
		hasEvents = p.HasEvents()
	}
	waker, _ := t.(sdk.Waker)
	if hasEvents {
		// Events of the latency run are stale here.
		if _, err := es.Events(ctx, 0); err != nil {
			return 0, fmt.Errorf("Events: %w", err)
		}
	}
	slotOf := map[sdk.HandleID]int{}
	post := func(slots []int) error {
		batch := make([]sdk.PostSpec, len(slots))
		for i, s := range slots {
			batch[i] = specs[s]
		}
		ids, err := Post(ctx, t, batch)
		if err != nil {
			return err
		}
		for i, id := range ids {
			slotOf[id] = slots[i]
		}
		return nil
	}
	all := make([]int, len(specs))
	for i := range all {
		all[i] = i
	}
	if err := post(all); err != nil {
		return 0, err
	}
	done := 0
	var start time.Time
	for {
		var finished []sdk.HandleID
		if hasEvents {
			evs, err := es.Events(ctx, 0)
			if err != nil {
				return 0, fmt.Errorf("Events: %w", err)
			}
			for _, e := range evs {
				if _, ours := slotOf[e.Handle]; !ours {
					continue
				}
				if e.State == sdk.StateDone {
					finished = append(finished, e.Handle)
				} else if e.State.Terminal() {
					return 0, fmt.Errorf("handle %d ended %v: %v", e.Handle, e.State, e.Reason)
				}
			}
		} else {
			ids := make([]sdk.HandleID, 0, len(slotOf))
			for id := range slotOf {
				ids = append(ids, id)
			}
			sts, err := t.Poll(ctx, ids)
			if err != nil {
				return 0, fmt.Errorf("Poll: %w", err)
			}
			for i, st := range sts {
				if st.Err == nil && st.State == sdk.StateDone {
					finished = append(finished, ids[i])
				}
			}
		}
		if len(finished) == 0 {
			if waker != nil {
				select {
				case <-waker.Wake():
				case <-time.After(time.Millisecond):
				}
			} else {
				runtime.Gosched()
			}
			continue
		}
		errs, err := t.Release(ctx, finished)
		if err == nil {
			err = errors.Join(errs...)
		}
		if err != nil {
			return 0, fmt.Errorf("Release: %w", err)
		}
		slots := make([]int, len(finished))
		for i, id := range finished {
			slots[i] = slotOf[id]
			delete(slotOf, id)
		}
		if start.IsZero() {
			// The first completions end the warm-up.
			start = time.Now()
		} else {
			done += len(finished)
		}
		if !start.IsZero() && time.Since(start) >= minTime {
			r := float64(done) / time.Since(start).Seconds()
			return r, drain(ctx, t, slotOf)
		}
		if err := post(slots); err != nil {
			return 0, err
		}
	}
}

// drain settles what is still in flight, for at most drainBound.
func drain(ctx context.Context, t sdk.Transport, slotOf map[sdk.HandleID]int) error {
	if len(slotOf) == 0 {
		return nil
	}
	ids := make([]sdk.HandleID, 0, len(slotOf))
	for id := range slotOf {
		ids = append(ids, id)
	}
	deadline := time.Now().Add(drainBound)
	_, err := Settle(ctx, t, ids, func(round int) error {
		if time.Now().After(deadline) {
			return fmt.Errorf("transfers still in flight after %v", drainBound)
		}
		return Spin(round)
	})
	return err
}
