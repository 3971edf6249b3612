// Package drive drives a transport through sdk.Transport: the loops of
// `custody bench --sdk` and `--e2e`, run through the plugin boundary and,
// for their in-process references, on the transport itself. The in-process
// references run in custody-bench-ref (cmd/benchref, Serve), a program of
// their own, so that the custody command links no transport library (the
// UCX transport's libucx).
package drive

import (
	"fmt"
	"os"
)

// One returns the single result of a batched call of one item.
func One[T any](res []T, err error) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	if len(res) != 1 {
		return zero, fmt.Errorf("transport returned %d results for 1 item", len(res))
	}
	return res[0], nil
}

// FirstErr returns the call's error, else the item's.
func FirstErr(call, item error) error {
	if call != nil {
		return call
	}
	return item
}

// ShmDir is where region files go: /dev/shm when it exists.
func ShmDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}
