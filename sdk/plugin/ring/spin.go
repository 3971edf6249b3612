package ring

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// How a side spins while it waits for its peer, before it sleeps: when
// it keeps its CPU and when it gives it away.

const (
	// pureSpin is how long a spinner keeps its CPU before it starts
	// giving it away.
	pureSpin = 50 * time.Microsecond
	// cpuCheck is how long a spinner (spinner.sameCPU), or a Poll
	// (pollYield), trusts its last look at whether it shares its CPU
	// with its peer.
	cpuCheck = 10 * time.Microsecond
)

// spinner is one spinning goroutine's last look at whether it holds the CPU
// its peer last ran on. The look may be a system call (currentCPU), which
// carries nothing to the peer: a spin round takes about a microsecond, and
// the answer changes only when a scheduler moves one side, so it is looked
// up at most every cpuCheck.
type spinner struct {
	at   time.Time
	same bool
}

// yield is one round of a spin that began at since, by the owner of mine
// waiting for the owner of peer. While the peer last ran on another CPU,
// and for at most pureSpin, it only lets the other goroutines of this
// process run: a peer on another CPU answers in well under a microsecond,
// and giving the CPU away (sched_yield) costs several microseconds per
// hand-off on a busy machine. When the peer last ran on this very CPU, or the spin has
// lasted, the spinner gives its CPU to other processes too: otherwise a
// spinner that shares its CPU with its peer stalls them both for a
// scheduler slice.
func (sp *spinner) yield(since time.Time, mine, peer doorbell) {
	pause(since, sp.sameCPU(time.Now(), func() bool { return sameCPU(mine, peer) }))
}

// sameCPU is look's answer at now, looked up again once the last one is
// cpuCheck old.
func (sp *spinner) sameCPU(now time.Time, look func() bool) bool {
	if sp.at.IsZero() || now.Sub(sp.at) >= cpuCheck {
		sp.same, sp.at = look(), now
	}
	return sp.same
}

// sameCPU records where the owner of mine runs and reports whether the
// owner of peer last ran there too. The caller must hold the mapping.
func sameCPU(mine, peer doorbell) bool {
	cpu, ok := currentCPU()
	if !ok {
		return false
	}
	mine.cpu.Store(cpu + 1)
	return peer.cpu.Load() == cpu+1
}

// pause is yield's second half; it touches no mapping.
func pause(since time.Time, same bool) {
	runtime.Gosched()
	if same || time.Since(since) > pureSpin {
		_, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
}
