package conformance

import "context"

// T is what a check needs from its runner. *testing.T satisfies it, so the
// suite runs under go test (Run); the CLI's runner (Execute) implements it
// itself. As in package testing, Fatalf, FailNow and Skipf end the check at
// once (they must be called from the check's own goroutine), and cleanups
// run last in, first out when the check ends, however it ends.
type T interface {
	Helper()
	Name() string
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	FailNow()
	Failed() bool
	Skipf(format string, args ...any)
	Cleanup(func())
	// Context is canceled just before the check's cleanups run.
	Context() context.Context
}
