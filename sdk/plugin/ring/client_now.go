package ring

import (
	"slices"

	"github.com/custody-dev/custody/sdk"
)

// The calls below answer, at once and in the caller's process, what the
// completion ring already brought: they never wait on the plugin process.
// A host runs them on its own goroutine instead of handing them to the one
// that makes transport calls, which saves two goroutine hand-offs per call.
// ok is false when the call would have to ask the plugin (no rings, rings
// that are not prompt, a handle not released at terminal) or when the rings
// are broken or the process gone: nothing was taken then, and the ordinary
// call (Events, Notifications, Release) gives the answer, errors included.

// EventsNow is Events from the completion ring, when the plugin forwards
// the transport's events and the transport is a Waker (prompt rings):
// nothing is asked of the plugin.
func (r *Client) EventsNow(max int) ([]sdk.Event, bool) {
	if !r.events || !r.prompt || !r.drainNow() {
		return nil, false
	}
	return takeLocked(r, &r.evq, max), true
}

// NotificationsNow is Notifications from the completion ring, when the
// transport is a Waker (prompt rings).
func (r *Client) NotificationsNow(max int) ([]sdk.Notification, bool) {
	if !r.prompt || !r.drainNow() {
		return nil, false
	}
	return takeLocked(r, &r.notes, max), true
}

// ReleaseNow is Release when the plugin released every one of ids at
// terminal, each once: every item is OK.
func (r *Client) ReleaseNow(ids []sdk.HandleID) ([]error, bool) {
	local := r.releasedAtTerminal(ids, true)
	if local == nil || slices.Contains(local, false) {
		return nil, false
	}
	r.forget(ids, local)
	return make([]error, len(ids)), true
}

// drainNow takes what the completion ring holds; false when the rings are
// broken (before or by what it took) or the process is gone.
func (r *Client) drainNow() bool {
	if !r.sound() {
		return false
	}
	r.drain()
	return r.sound()
}

// sound reports whether the rings are unbroken and the process alive.
func (r *Client) sound() bool {
	r.mu.Lock()
	broken := r.broken != nil || r.unmapped
	r.mu.Unlock()
	return !broken && r.done.Err() == nil
}

// takeLocked takes up to max items (every one when max <= 0) off the
// head of *q, one of r's queues, under r.mu.
func takeLocked[T any](r *Client, q *[]T, max int) []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []T
	out, *q = take(*q, max)
	return out
}

// take splits up to max items (all when max <= 0) off q's head, copied.
func take[T any](q []T, max int) (out, rest []T) {
	n := len(q)
	if max > 0 && max < n {
		n = max
	}
	if n == 0 {
		return nil, q
	}
	return append([]T(nil), q[:n]...), q[n:]
}

// forget drops the record of each of ids marked local (released at
// terminal, now released to the host too).
func (r *Client) forget(ids []sdk.HandleID, local []bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, id := range ids {
		if local[i] {
			delete(r.known, id)
		}
	}
}
