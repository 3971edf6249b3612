package conformance

import "time"

// backoff paces a bounded polling loop: it waits a little longer each round,
// from 20 µs up to 5 ms, so that polling finds fast completions quickly
// without starving the transport of CPU. It paces; it never synchronises:
// every loop that uses it checks a condition and a deadline.
type backoff struct{ d time.Duration }

func (b *backoff) wait() {
	switch {
	case b.d == 0:
		b.d = 20 * time.Microsecond
	case b.d < 5*time.Millisecond:
		b.d *= 2
	}
	time.Sleep(b.d)
}
