package fake

// Wake implements sdk.Waker: the channel receives a value (sent without
// blocking, capacity 1, so wake-ups coalesce) whenever a handle turns
// terminal and its event is queued (the DMA engine completes, fails or
// cancels a transfer, a fault or a lost peer ends it), a notification
// reaches the inbox, or the agent dies (Kill or a crash fault: every call
// then answers PLUGIN_SHUTDOWN). A wake-up may be spurious; a change is
// never left without one. The channel is made by New, is the same for the
// transport's life and is never closed.
func (t *Transport) Wake() <-chan struct{} { return t.woken }

// WakeReasons implements sdk.WakeReasoner: states when a handle turned
// terminal or the agent died since the previous call, notifications when
// a notification reached the inbox or the agent died. Each reason is
// recorded before its wake-up is sent.
func (t *Transport) WakeReasons() (states, notifications bool) {
	return t.wokeStates.Swap(false), t.wokeNotes.Swap(false)
}

// signal sends a wake-up for both reasons (the agent died).
func (t *Transport) signal() { t.signalFor(true, true) }

// signalFor sends a wake-up to Wake's channel without blocking, for a
// state change, a notification or both; one already waiting covers this
// change too. Callers may hold t.mu.
func (t *Transport) signalFor(states, notes bool) {
	if states {
		t.wokeStates.Store(true)
	}
	if notes {
		t.wokeNotes.Store(true)
	}
	select {
	case t.woken <- struct{}{}:
	default:
	}
}
