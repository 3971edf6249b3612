package conformance

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// parallelWorkers is how many goroutines a check runs its repetitions on.
const parallelWorkers = 8

// parallel runs fn(t, w, i) for i in [0, n) on up to parallelWorkers
// goroutines at once (w is the worker's number, below parallelWorkers, so
// that a worker can own a slot of memory), and returns when every started call has ended. fn
// gets a T of its own worker: its Errorf fails the check, its Fatalf and
// Skipf end that worker (runtime.Goexit) and stop the others before their
// next call; a skip becomes the check's skip once every worker ended, a
// panic the check's failure. Agents a worker uses must be viewed through
// its T (agent.as), so that their helpers report to it. Nothing more is
// started once the check failed or its context ended. As a Fatalf of the
// check would, a worker's Fatalf ends the check once every worker ended.
func (e *env) parallel(n int, fn func(t T, w, i int)) {
	e.t.Helper()
	e.parallelOn(parallelWorkers, n, fn)
}

// parallelOn is parallel on at most workers goroutines.
func (e *env) parallelOn(workers, n int, fn func(t T, w, i int)) {
	e.t.Helper()
	var (
		next  atomic.Int64
		stop  atomic.Bool
		fatal atomic.Bool
		skip  atomic.Pointer[string]
		wg    sync.WaitGroup
	)
	w := &workerT{T: e.t, stop: &stop, fatal: &fatal, skip: &skip}
	for wi := range min(n, workers) {
		wg.Go(func() {
			defer func() {
				if r := recover(); r != nil {
					buf := make([]byte, 4096)
					buf = buf[:runtime.Stack(buf, false)]
					e.t.Errorf("panic in a worker: %v\n%s", r, buf)
					stop.Store(true)
				}
			}()
			for !stop.Load() && !e.t.Failed() && e.ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				ended := false
				func() {
					// Runs on Goexit too: a Fatalf or Skipf of fn stops the
					// other workers.
					defer func() {
						if !ended {
							stop.Store(true)
						}
					}()
					fn(w, wi, i)
					ended = true
				}()
			}
		})
	}
	wg.Wait()
	if fatal.Load() {
		e.t.FailNow()
	}
	if s := skip.Load(); s != nil && !e.t.Failed() {
		e.t.Skipf("%s", *s)
	}
}

// workerT is the T of one worker of parallel: what it reports goes to the
// check's T, but Fatalf, FailNow and Skipf end only the worker's goroutine.
// Only the first worker to stop says why: the others, which stop because
// of it (a dead process fails every call in flight), add nothing.
type workerT struct {
	T
	stop, fatal *atomic.Bool
	skip        *atomic.Pointer[string]
}

func (w *workerT) Helper() {}

func (w *workerT) Fatalf(format string, args ...any) {
	w.fatal.Store(true)
	if w.stop.CompareAndSwap(false, true) {
		w.T.Errorf(format, args...)
	}
	runtime.Goexit()
}

func (w *workerT) FailNow() {
	w.fatal.Store(true)
	if w.stop.CompareAndSwap(false, true) {
		w.T.Errorf("FailNow called in a worker")
	}
	runtime.Goexit()
}

func (w *workerT) Skipf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	w.skip.CompareAndSwap(nil, &msg)
	w.stop.Store(true)
	runtime.Goexit()
}
