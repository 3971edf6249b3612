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

// signal sends a wake-up to Wake's channel without blocking; one already
// waiting covers this change too. Callers may hold t.mu.
func (t *Transport) signal() {
	select {
	case t.woken <- struct{}{}:
	default:
	}
}
