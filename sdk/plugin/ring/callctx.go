package ring

import (
	"context"
	"sync"
	"time"
)

// callCtx is the context of a call the pump serves from the submission
// ring: its deadline is the one the host wrote into the entry. Unlike
// context.WithDeadline it arms no timer unless someone asks for Done:
// arming and stopping a timer costs a sizeable share of what a small
// transfer takes from Post to DONE, and a transport's Post or Release
// rarely waits on its context. Err compares the deadline with
// the clock, so a transport that only checks Err (as sdk/kit does) never
// makes a timer. end cancels it once the call returned.
type callCtx struct {
	dl time.Time

	mu    sync.Mutex
	err   error         // set once: DeadlineExceeded or Canceled
	done  chan struct{} // made by the first Done
	timer *time.Timer   // armed by the first Done, until dl
}

// newCallCtx is the context of a call with deadline dl (zero: none).
func newCallCtx(dl time.Time) *callCtx { return &callCtx{dl: dl} }

var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func (c *callCtx) Deadline() (time.Time, bool) { return c.dl, !c.dl.IsZero() }

func (c *callCtx) Value(any) any { return nil }

// Done is closed once the deadline passed or the call ended.
func (c *callCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		return c.done
	}
	if c.err == nil && !c.dl.IsZero() && !time.Now().Before(c.dl) {
		c.err = context.DeadlineExceeded
	}
	if c.err != nil {
		c.done = closedChan
		return c.done
	}
	c.done = make(chan struct{})
	if !c.dl.IsZero() {
		c.timer = time.AfterFunc(time.Until(c.dl), func() { c.end(context.DeadlineExceeded) })
	}
	return c.done
}

// Err is DeadlineExceeded once the deadline passed, Canceled once the call
// ended, else nil.
func (c *callCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil && !c.dl.IsZero() && !time.Now().Before(c.dl) {
		c.setErr(context.DeadlineExceeded)
	}
	return c.err
}

// end sets the context's error (the first one stays), closes Done and
// stops the timer. The pump ends each call's context with Canceled once
// the call returned.
func (c *callCtx) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.setErr(err)
	}
}

// setErr records err and releases Done's waiters (c.mu held, c.err nil).
func (c *callCtx) setErr(err error) {
	c.err = err
	if c.done != nil && c.done != closedChan {
		close(c.done)
	}
	if c.timer != nil {
		c.timer.Stop()
	}
}
