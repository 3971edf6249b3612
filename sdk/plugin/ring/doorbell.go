package ring

import (
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// How a side sleeps on its futex word in the mapping, and how its peer
// wakes it (doc.go: Sleeping).

// doorbell wakes a sleeping side: word is the futex word, sleeping says
// whether and why its owner sleeps (or is about to): 0 awake, asleep,
// or awaitingRoom.
//
// cpu is where the owner last spun (CPU number + 1; 0: not known), so that
// a spinner can tell whether it holds the very CPU its peer needs.
type doorbell struct {
	word, sleeping, cpu *atomic.Uint32
}

// Why a side sleeps (doorbell.sleeping).
const (
	// asleep: it waits for entries the peer publishes.
	asleep = 1
	// awaitingRoom: it waits for room in a ring it produces into, which
	// the peer frees as it consumes; entries the peer publishes wake it
	// too.
	awaitingRoom = 2
)

// ring wakes the owner if it sleeps, and reports whether it did. Call it
// after publishing. Whoever wakes the owner clears its flag, so that of
// several producers, or several entries, before the owner runs again,
// only the first pays a FUTEX_WAKE: the owner checks the rings once it is
// awake, before it sleeps again.
func (d doorbell) ring() bool {
	for {
		s := d.sleeping.Load()
		if s == 0 {
			return false
		}
		if d.sleeping.CompareAndSwap(s, 0) {
			d.word.Add(1)
			futexWake(d.word)
			return true
		}
	}
}

// roomFreed wakes the owner if it sleeps waiting for room (awaitingRoom).
// Call it after consuming. An owner asleep for entries is left asleep:
// room tells it nothing.
func (d doorbell) roomFreed() {
	if d.sleeping.Load() == awaitingRoom && d.sleeping.CompareAndSwap(awaitingRoom, 0) {
		d.word.Add(1)
		futexWake(d.word)
	}
}

// force wakes the owner whether or not it says it sleeps (shutdown).
func (d doorbell) force() {
	d.word.Add(1)
	futexWake(d.word)
}

// prepare announces that the owner is about to sleep, for why (asleep or
// awaitingRoom), and returns the word to wait on. The owner must check for
// work (or room) once more after it, then call wait or cancel.
func (d doorbell) prepare(why uint32) uint32 {
	d.sleeping.Store(why)
	return d.word.Load()
}

// wait sleeps until the word moves from v, a wake-up, or timeout (none
// when timeout <= 0).
func (d doorbell) wait(v uint32, timeout time.Duration) {
	futexWait(d.word, v, timeout)
	d.sleeping.Store(0)
}

// cancel undoes prepare.
func (d doorbell) cancel() { d.sleeping.Store(0) }

// FUTEX_WAIT and FUTEX_WAKE without FUTEX_PRIVATE_FLAG: the word is in a
// mapping shared between processes.
const (
	futexOpWait = 0
	futexOpWake = 1
)

func futexWait(w *atomic.Uint32, v uint32, timeout time.Duration) {
	var ts *unix.Timespec
	if timeout > 0 {
		t := unix.NsecToTimespec(timeout.Nanoseconds())
		ts = &t
	}
	// EAGAIN (the word moved), EINTR and ETIMEDOUT all mean: look again.
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexOpWait, uintptr(v), uintptr(unsafe.Pointer(ts)), 0, 0)
}

func futexWake(w *atomic.Uint32) {
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexOpWake, 1, 0, 0, 0)
}
