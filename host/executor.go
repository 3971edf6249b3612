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
		for _, j := range q {
			r := workResult{id: j.w.ID}
			if j.tp == nil {
				r.err = sdk.Errorf(sdk.CodePluginShutdown, "epoch %d: its transport process is gone", j.w.Epoch)
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
				r.res, r.err = runWork(ctx, j.tp, j.w)
				cancel()
			}
			select {
			case e.results <- r:
			case <-e.stop:
				return
			}
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
