package plugin

import "time"

// Without rings the host can learn nothing by itself: Wake's channel then
// ticks, so that a host that sleeps on it still polls.

// fallbackWakeEvery paces Wake's channel when the rings are not in use
// (off, refused, or the agent closed): the host then learns nothing by
// itself and must poll.
const fallbackWakeEvery = 5 * time.Millisecond

// startFallbackTicker starts fallbackTicker once, at the first Wake.
func (p *Plugin) startFallbackTicker() {
	p.tickerOnce.Do(func() {
		exit := make(chan struct{})
		p.tickerMu.Lock()
		p.tickerExit = exit
		p.tickerMu.Unlock()
		go p.fallbackTicker(exit)
	})
}

// fallbackTicker wakes the host until the rings are attached, or for the
// process's life when they never are.
func (p *Plugin) fallbackTicker(exit chan struct{}) {
	defer close(exit)
	t := time.NewTicker(fallbackWakeEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if p.rings.Load() != nil {
				// The rings wake the host from now on; once they are
				// detached (Close), the agent has nothing left to say.
				return
			}
			select {
			case p.wake <- struct{}{}:
			default:
			}
		case <-p.grpc.done.Done():
			return
		}
	}
}

// stopFallbackTicker waits for the ticker to end, if it started (Kill,
// Stop: the process is gone, so it ends).
func (p *Plugin) stopFallbackTicker() {
	p.tickerMu.Lock()
	exit := p.tickerExit
	p.tickerMu.Unlock()
	if exit != nil {
		<-exit
	}
}
