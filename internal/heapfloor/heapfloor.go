// Package heapfloor keeps the garbage collector of a process with a small
// heap from running many times a second.
//
// Go collects when the heap reaches twice what the last collection left
// live (GOGC=100), and at least 4 MiB. A transport process holds a few MiB
// live, and its data path allocates some hundreds of bytes per transfer:
// at a few hundred thousand transfers a second it collected dozens of times
// a second, and the collections took a tenth of the process's CPU. A
// buffer kept alive that nothing touches counts as live, so the goal
// becomes twice the live heap plus the floor, and the collector runs that
// many times less often. The buffer itself takes address space, not
// memory: its pages come from the operating system zeroed and are never
// written. What the process pays in memory is the garbage it now leaves
// between two collections, up to about the floor.
package heapfloor

import (
	"fmt"
	"os"
	"strconv"
)

// Env names the variable that sets the floor in MiB; 0 turns it off.
const Env = "CUSTODY_TRANSPORT_HEAP_FLOOR_MIB"

// DefaultMiB is the floor when Env is unset.
const DefaultMiB = 32

// maxMiB bounds what Env may ask for.
const maxMiB = 1 << 14

// floor is the buffer kept alive; never read or written.
//
//lint:ignore U1000 written and never read: being reachable is its use
var floor []byte

// Keep keeps mib MiB of heap alive for the process's life, in place of the
// floor kept before (0: none).
func Keep(mib int) {
	floor = nil
	if mib > 0 {
		floor = make([]byte, mib<<20)
	}
}

// FromEnv is the floor Env asks for: DefaultMiB when it is unset or
// empty, an error naming it when it is not a whole number of MiB from 0
// to 16384.
func FromEnv() (int, error) {
	v := os.Getenv(Env)
	if v == "" {
		return DefaultMiB, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > maxMiB {
		return 0, fmt.Errorf("%s=%q: want a whole number of MiB from 0 (no floor) to %d", Env, v, maxMiB)
	}
	return n, nil
}
