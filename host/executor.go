package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/sdk"
)

// executor runs core's Work against the transport on its own goroutine, off
// the owner goroutine that answers the engine, in the order it was handed
// out. Each call is bounded by the call timeout; a transport that keeps
// timing out is fenced by core (Config.WedgedAfter), never waited on by the
// engine API.
//
// Consecutive Posts queued for one transport are made as one call, and so
// are consecutive Releases, as many as one call may carry (job.most): each
// Work still gets its own items' results, and a call-level error reaches
// every Work of the call, as it would have reached each alone (a call that
// times out so counts once per Work toward core's Config.WedgedAfter: each
// Work made alone would have waited out a timeout of its own). While one
// call is out, the reads the engine starts meanwhile queue up, so under
// load they cost one round trip to the transport together instead of one
// each; a lone Work is made as it comes.
type executor struct {
	timeout time.Duration
	results chan workResult

	mu    sync.Mutex
	queue []job
	kick  chan struct{} // capacity 1: work was queued
	stop  chan struct{}
	done  chan struct{}
}

// job is one Work and the transport of its epoch (nil when that process is
// gone: the Work fails at once).
type job struct {
	w  core.Work
	tp sdk.Transport
	// most is how many items one call to tp may carry; a Post or Release
	// is made together with the same calls after it while they fit
	// (below 2: alone).
	most int
}

// workResult is the outcome of one job, for core.Done.
type workResult struct {
	id  core.WorkID
	res core.Result
	err error
}

func newExecutor(timeout time.Duration) *executor {
	e := &executor{
		timeout: timeout,
		results: make(chan workResult, 64),
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go e.run()
	return e
}

// submit queues jobs; it never blocks.
func (e *executor) submit(jobs ...job) {
	if len(jobs) == 0 {
		return
	}
	e.mu.Lock()
	e.queue = append(e.queue, jobs...)
	e.mu.Unlock()
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// close stops the executor once its current call returns; queued jobs are
// dropped.
func (e *executor) close() {
	close(e.stop)
	<-e.done
}

func (e *executor) run() {
	defer close(e.done)
	for {
		e.mu.Lock()
		q := e.queue
		e.queue = nil
		e.mu.Unlock()
		for rest := q; len(rest) > 0; {
			n := oneCall(rest)
			for _, r := range e.call(rest[:n]) {
				select {
				case e.results <- r:
				case <-e.stop:
					return
				}
			}
			rest = rest[n:]
		}
		if len(q) > 0 {
			continue
		}
		select {
		case <-e.kick:
		case <-e.stop:
			return
		}
	}
}

// oneCall returns how many jobs at the head of q are made as one call: a
// Post, or a Release, with the same calls to the same transport after it,
// while their items fit in the head's most.
func oneCall(q []job) int {
	head := q[0]
	if head.tp == nil || (head.w.Kind != core.WorkPost && head.w.Kind != core.WorkRelease) {
		return 1
	}
	items, n := workItems(head.w), 1
	for ; n < len(q); n++ {
		j := q[n]
		if j.tp != head.tp || j.w.Epoch != head.w.Epoch || j.w.Kind != head.w.Kind || items+workItems(j.w) > head.most {
			break
		}
		items += workItems(j.w)
	}
	return n
}

// workItems counts the items of a Post or Release.
func workItems(w core.Work) int {
	if w.Kind == core.WorkPost {
		return len(w.Posts)
	}
	return len(w.Handles)
}

// call makes the jobs' call (one call for all of them, as oneCall grouped
// them) and returns each job's result, in order.
func (e *executor) call(jobs []job) []workResult {
	out := make([]workResult, len(jobs))
	for i, j := range jobs {
		out[i].id = j.w.ID
	}
	head := jobs[0]
	if head.tp == nil {
		out[0].err = sdk.Errorf(sdk.CodePluginShutdown, "epoch %d: its transport process is gone", head.w.Epoch)
		return out
	}
	w := head.w
	if len(jobs) > 1 {
		w.Posts, w.Handles = nil, nil
		for _, j := range jobs {
			w.Posts = append(w.Posts, j.w.Posts...)
			w.Handles = append(w.Handles, j.w.Handles...)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	res, err := runWork(ctx, head.tp, w)
	cancel()
	if len(jobs) == 1 {
		out[0].res, out[0].err = res, err
		return out
	}
	// Each job takes its own items' results; a transport that returned
	// fewer than it was given leaves the later jobs short, which core
	// reports as it would for a lone call.
	at := 0
	for i, j := range jobs {
		n := workItems(j.w)
		out[i].err = err
		if w.Kind == core.WorkPost {
			out[i].res.Posts = part(res.Posts, at, n)
		} else {
			out[i].res.Errs = part(res.Errs, at, n)
		}
		at += n
	}
	return out
}

// part is s[at:at+n], cut short where s ends.
func part[T any](s []T, at, n int) []T {
	lo, hi := min(at, len(s)), min(at+n, len(s))
	return s[lo:hi:hi]
}

// runWork makes w's call against tp.
func runWork(ctx context.Context, tp sdk.Transport, w core.Work) (core.Result, error) {
	var res core.Result
	var err error
	switch w.Kind {
	case core.WorkPost:
		res.Posts, err = tp.Post(ctx, w.Posts)
	case core.WorkPoll:
		res.States, err = tp.Poll(ctx, w.Handles)
	case core.WorkEvents:
		es, ok := tp.(sdk.EventSource)
		if !ok {
			return res, sdk.Errorf(sdk.CodeUnsupported, "the transport has no Events")
		}
		res.Events, err = es.Events(ctx, 0)
	case core.WorkRelease:
		res.Errs, err = tp.Release(ctx, w.Handles)
	case core.WorkCancel:
		res.Errs, err = tp.Cancel(ctx, w.Handles)
	case core.WorkSendNotifications:
		res.Errs, err = tp.SendNotifications(ctx, w.Notes)
	case core.WorkNotifications:
		res.Notifications, err = tp.Notifications(ctx, 0)
	case core.WorkRegisterMemory:
		res.Registrations, err = tp.RegisterMemory(ctx, w.Regions)
	case core.WorkDeregisterMemory:
		res.Errs, err = tp.DeregisterMemory(ctx, w.RegionIDs)
	case core.WorkLoadPeers:
		res.PeerResults, err = tp.LoadPeers(ctx, w.Peers)
	case core.WorkUnloadPeers:
		res.Errs, err = tp.UnloadPeers(ctx, w.PeerIDs)
	case core.WorkPrepareDescriptors:
		res.DlistResults, err = tp.PrepareDescriptors(ctx, w.Dlists)
	case core.WorkReleaseDescriptors:
		res.Errs, err = tp.ReleaseDescriptors(ctx, w.DlistIDs)
	case core.WorkClose:
		err = tp.Close(ctx)
	default:
		err = sdk.Errorf(sdk.CodeInvalidArgument, "unknown work kind %v", w.Kind)
	}
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded) && sdk.CodeOf(err) != sdk.CodeTimeout:
		err = sdk.Errorf(sdk.CodeTimeout, "%v: %v", w.Kind, err)
	default:
		err = fmt.Errorf("%v: %w", w.Kind, err)
	}
	return res, err
}
