package client

import (
	"sync"
	"time"

	enginev1 "github.com/custody-dev/custody/api/engine/v1"
)

// DefaultAckDelay is how long WatchFinished waits, after fn processed a
// report, before it acknowledges it (WithAckDelay): at most 20
// acknowledgements a second, and what a later engine process gets again
// of what this one processed is at most this much. The Python client's is
// the same.
const DefaultAckDelay = 50 * time.Millisecond

// WithAckDelay sets how long WatchFinished waits, after fn processed a
// report, before it acknowledges it, so that one acknowledgement covers
// every report processed meanwhile: at hundreds of reports a second, that
// saves the client, the socket and the host a message and its wake-ups for
// nearly every report. 0 acknowledges each report at once. Nothing is lost
// either way: the client's own next stream opens at its cursor, which
// acknowledges everything fn processed; only a stream opened by another
// client (a new engine process) gets what was processed but not yet
// acknowledged. Default DefaultAckDelay; at most 1 s.
func WithAckDelay(d time.Duration) Option { return func(c *Client) { c.ackDelay = d } }

// maxAckDelay bounds WithAckDelay: the host keeps each report until it is
// acknowledged.
const maxAckDelay = time.Second

// acker sends one stream's acknowledgements. With a delay, its goroutine
// is the stream's only sender once it runs: after a report is processed,
// it waits the delay, then acknowledges the newest cursor.
type acker struct {
	stream enginev1.Engine_WatchFinishedClient
	delay  time.Duration
	after  func(time.Duration) (<-chan time.Time, func() bool)
	noted  func(cursor uint64)
	sendFn func(enginev1.Engine_WatchFinishedClient, *enginev1.WatchFinishedRequest) error

	mu          sync.Mutex
	cursor, inc uint64 // the newest processed
	due         bool   // cursor is not acknowledged yet

	kick, stop, done chan struct{}
}

// startAcker starts the acknowledgements of stream; end must be called
// once the stream is done with.
func (c *Client) startAcker(stream enginev1.Engine_WatchFinishedClient) *acker {
	a := &acker{stream: stream, delay: c.ackDelay, after: c.ackAfter, noted: c.ackNoted, sendFn: c.ackSend}
	if a.sendFn == nil {
		a.sendFn = enginev1.Engine_WatchFinishedClient.Send
	}
	if a.delay <= 0 {
		return a
	}
	if a.after == nil {
		a.after = func(d time.Duration) (<-chan time.Time, func() bool) {
			t := time.NewTimer(d)
			return t.C, t.Stop
		}
	}
	a.kick, a.stop, a.done = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	go a.run()
	return a
}

// processed records that fn processed everything below cursor, of host
// process inc.
func (a *acker) processed(cursor, inc uint64) {
	if a.delay <= 0 {
		a.send(cursor, inc)
		return
	}
	a.mu.Lock()
	a.cursor, a.inc, a.due = cursor, inc, true
	a.mu.Unlock()
	if a.noted != nil {
		a.noted(cursor)
	}
	select {
	case a.kick <- struct{}{}:
	default: // a kick waits already
	}
}

func (a *acker) run() {
	defer close(a.done)
	for {
		select {
		case <-a.kick:
		case <-a.stop:
			return
		}
		fire, cancel := a.after(a.delay)
		select {
		case <-fire:
		case <-a.stop:
			cancel()
			return
		}
		a.mu.Lock()
		cursor, inc, due := a.cursor, a.inc, a.due
		a.due = false
		a.mu.Unlock()
		if due {
			a.send(cursor, inc)
		}
	}
}

// send acknowledges cursor. A lost acknowledgement costs nothing: the
// next stream opens at the client's cursor, which acknowledges it too.
func (a *acker) send(cursor, inc uint64) {
	_ = a.sendFn(a.stream, &enginev1.WatchFinishedRequest{Cursor: cursor, Incarnation: inc})
}

// end stops the acknowledgements; what was not sent yet is left to the
// next stream's opening cursor.
func (a *acker) end() {
	if a.delay > 0 {
		close(a.stop)
		<-a.done
	}
}
