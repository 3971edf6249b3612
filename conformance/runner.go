package conformance

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Execute runs every selected check outside go test, one after another,
// and returns their results. Each check runs in its own goroutine (Fatalf
// and Skipf end it with runtime.Goexit, as in package testing); a check
// that outlives Config.CheckTimeout plus a grace period is reported failed
// and abandoned. The error is for a Config that cannot run at all (no
// factory, the transport cannot be described); check failures are in the
// report.
func Execute(ctx context.Context, cfg Config) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	desc, err := describe(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("describe the transport under test: %w", err)
	}
	rep := &Report{Transport: desc, Params: cfg.Params}
	for _, c := range allChecks() {
		if cfg.Match != nil && !cfg.Match(c.name) {
			continue
		}
		rep.Results = append(rep.Results, executeOne(ctx, c, cfg, func(t T) { runCheck(t, c, cfg, desc) }))
	}
	return rep, nil
}

// abandonGrace is how long, at most, a check that outlived its timeout gets
// to end after its context is canceled before the runner leaves it behind
// (never more than the timeout itself).
const abandonGrace = 30 * time.Second

// executeOne runs fn as check c and records its result.
func executeOne(ctx context.Context, c check, cfg Config, fn func(T)) Result {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t := &checkT{name: c.name, ctx: ctx, cancel: cancel}
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer t.runCleanups()
		defer t.recoverPanic()
		fn(t)
	}()
	grace := min(abandonGrace, cfg.CheckTimeout)
	timer := time.NewTimer(cfg.CheckTimeout + grace)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.cancel()
		t.Errorf("did not finish within %v (check timeout plus %v grace): a call or wait hangs; the check was abandoned", cfg.CheckTimeout, grace)
	}
	return t.result(c, time.Since(start))
}

// checkT is the T of Execute's runner.
type checkT struct {
	name   string
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	failed   bool
	skipped  bool
	first    string // the first failure, or the skip reason
	log      []string
	cleanups []func()
}

var _ T = (*checkT)(nil)

func (t *checkT) Helper()                  {}
func (t *checkT) Name() string             { return t.name }
func (t *checkT) Context() context.Context { return t.ctx }

func (t *checkT) Logf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.log = append(t.log, fmt.Sprintf(format, args...))
}

func (t *checkT) Errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.failed {
		t.failed, t.first = true, msg
	}
	t.log = append(t.log, "FAIL: "+msg)
}

func (t *checkT) Fatalf(format string, args ...any) {
	t.Errorf(format, args...)
	runtime.Goexit()
}

func (t *checkT) FailNow() {
	if !t.Failed() {
		t.Errorf("FailNow called")
	}
	runtime.Goexit()
}

func (t *checkT) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *checkT) Skipf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	t.mu.Lock()
	if !t.skipped && !t.failed {
		t.skipped, t.first = true, msg
	}
	t.log = append(t.log, "SKIP: "+msg)
	t.mu.Unlock()
	runtime.Goexit()
}

func (t *checkT) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

// runCleanups cancels the context and runs the cleanups last in, first
// out. It defers itself before each cleanup, so a cleanup that calls
// Fatalf (Goexit) or panics does not stop the ones after it.
func (t *checkT) runCleanups() {
	t.cancel()
	t.mu.Lock()
	n := len(t.cleanups)
	if n == 0 {
		t.mu.Unlock()
		return
	}
	f := t.cleanups[n-1]
	t.cleanups = t.cleanups[:n-1]
	t.mu.Unlock()
	defer t.runCleanups()
	defer t.recoverPanic()
	f()
}

// recoverPanic turns a panic of the check into its failure.
func (t *checkT) recoverPanic() {
	if r := recover(); r != nil {
		buf := make([]byte, 4096)
		buf = buf[:runtime.Stack(buf, false)]
		t.Errorf("panic: %v\n%s", r, strings.TrimSpace(string(buf)))
	}
}

// result is the check's outcome once it ended.
func (t *checkT) result(c check, d time.Duration) Result {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := Result{Name: c.name, Group: c.group(), Doc: c.doc, Status: StatusPass, Duration: d, Log: append([]string(nil), t.log...)}
	switch {
	case t.failed:
		r.Status, r.Message = StatusFail, t.first
	case t.skipped:
		r.Status, r.Message = StatusSkip, t.first
	}
	return r
}
