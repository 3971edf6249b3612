package plugin

import (
	"fmt"
	"strings"
	"sync"
)

// What a transport process that could not start wrote to its standard
// error, for the error Launch returns: go-plugin says only that the
// plugin printed nothing to its stdout, and lists possible causes.

// stderrTailBytes is how much of the end of a plugin's standard error a
// launch keeps.
const stderrTailBytes = 4 << 10

// stderrTail keeps the last stderrTailBytes written to it.
type stderrTail struct {
	mu sync.Mutex
	b  []byte
}

func (t *stderrTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - stderrTailBytes; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *stderrTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// loaderFailure says which library the dynamic linker could not load for
// the binary at path, from what the process wrote to its standard error
// ("<path>: error while loading shared libraries: <lib>: <why>"), and how
// to find out where it looked; "" when the linker said no such thing.
func loaderFailure(path, stderr string) string {
	const marker = "error while loading shared libraries: "
	i := strings.LastIndex(stderr, marker)
	if i < 0 {
		return ""
	}
	line, _, _ := strings.Cut(stderr[i+len(marker):], "\n")
	lib, why, _ := strings.Cut(line, ": ")
	return fmt.Sprintf("the dynamic linker could not load %s (%s): `ldd %s` shows where it looked; install the library there, build the transport with an rpath to it, or name its directory in LD_LIBRARY_PATH",
		lib, strings.TrimSpace(why), path)
}
