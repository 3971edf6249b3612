package bench

import (
	"context"
	"sync"
	"time"

	"github.com/custody-dev/custody/client"
)

// reports watches one host's finished reports and hands each request's
// outcome ("" for success, else the reason) to whoever expects it.
type reports struct {
	mu      sync.Mutex
	waiters map[string]chan string
	early   map[string]string
	cancel  context.CancelFunc
	done    chan struct{}
}

// newReports watches c's WatchFinished stream, or, with poll positive,
// calls GetFinished at that interval instead (the old way, for
// comparison), until stop.
func newReports(ctx context.Context, c *client.Client, poll time.Duration) *reports {
	ctx, cancel := context.WithCancel(ctx)
	r := &reports{waiters: map[string]chan string{}, early: map[string]string{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		if poll > 0 {
			t := time.NewTicker(poll)
			defer t.Stop()
			for ctx.Err() == nil {
				if f, err := c.GetFinished(ctx); err == nil {
					r.deliver(f)
				}
				select {
				case <-ctx.Done():
				case <-t.C:
				}
			}
			return
		}
		for ctx.Err() == nil {
			_ = c.WatchFinished(ctx, func(f client.Finished) error { r.deliver(f); return nil })
		}
	}()
	return r
}

func (r *reports) stop() { r.cancel(); <-r.done }

// expect returns where request id's outcome will arrive; call it before
// the request is issued.
func (r *reports) expect(id string) <-chan string {
	ch := make(chan string, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if reason, ok := r.early[id]; ok {
		delete(r.early, id)
		ch <- reason
		return ch
	}
	r.waiters[id] = ch
	return ch
}

func (r *reports) deliver(f client.Finished) {
	r.mu.Lock()
	defer r.mu.Unlock()
	failed := map[string]string{}
	for _, x := range f.Failed {
		failed[x.Request] = x.Reason
	}
	report := func(id string) {
		reason, bad := failed[id]
		if !bad {
			reason = ""
		} else if reason == "" {
			reason = "failed"
		}
		delete(failed, id)
		if ch, ok := r.waiters[id]; ok {
			delete(r.waiters, id)
			ch <- reason
			return
		}
		r.early[id] = reason
	}
	for _, id := range f.FinishedSending {
		report(id)
	}
	for _, id := range f.FinishedRecving {
		report(id)
	}
	for id := range failed {
		report(id)
	}
}
