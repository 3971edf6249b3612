package kit

import (
	"slices"

	"github.com/custody-dev/custody/sdk"
)

// MaxEvents is how many undrained events a Book keeps before it forgets
// those of handles already released: a caller that polls and never calls
// Events must not grow the queue without bound, and one that released a
// handle has seen its terminal state.
const MaxEvents = 1 << 16

// event queues e for Events.
func (b *Book[R, P, D, H]) event(e sdk.Event) {
	if len(b.events) >= MaxEvents {
		b.events = slices.DeleteFunc(b.events, func(e sdk.Event) bool { return b.handles[e.Handle] == nil })
	}
	b.events = append(b.events, e)
}

// Events drains up to max events (all when max <= 0), oldest first: one
// per handle, when it turns terminal, each delivered once.
func (b *Book[R, P, D, H]) Events(max int) []sdk.Event {
	out := drain(&b.events, max)
	return out
}

// Deliver puts a received notification in the inbox; from is the
// sender's agent name from its Open. It reports false, dropping the
// message, while the agent is not open.
func (b *Book[R, P, D, H]) Deliver(from string, msg []byte) bool {
	if b.state != stateOpen {
		return false
	}
	b.inbox = append(b.inbox, sdk.Notification{From: from, Message: msg})
	return true
}

// Notifications drains up to max received messages (all when max <= 0),
// each once, in the order they were delivered.
func (b *Book[R, P, D, H]) Notifications(max int) []sdk.Notification {
	return drain(&b.inbox, max)
}

// Inbox is how many received messages wait to be drained.
func (b *Book[R, P, D, H]) Inbox() int { return len(b.inbox) }

// drain removes and returns up to max items from the front of q.
func drain[T any](q *[]T, max int) []T {
	n := len(*q)
	if max > 0 && max < n {
		n = max
	}
	out := slices.Clone((*q)[:n])
	clear((*q)[:n])
	*q = (*q)[n:]
	if len(*q) == 0 {
		*q = nil
	}
	return out
}
