//go:build nixl

package nixl

import (
	"testing"
	"time"
)

// TestShmDelayFollowsTheLoadedUCX: over shared memory the progress
// thread's default wait is decided by the UCX NIXL's backend loads, which
// the transport must find in its process.
func TestShmDelayFollowsTheLoadedUCX(t *testing.T) {
	c, err := parseParams(map[string]string{"tls": "posix,sysv"}, pluginParams)
	if err != nil {
		t.Fatal(err)
	}
	got := c.delay()
	major, minor, ok := ucxVersion()
	if !ok {
		t.Fatal("no UCX found loaded in this process after NIXL's UCX plugin was loaded")
	}
	if want := shmProgressDelay(major, minor, true); got != want {
		t.Fatalf("UCX %d.%d: default progress delay over posix,sysv %v, want %v", major, minor, got, want)
	}
	c.progressDelay, c.delaySet = 5*time.Millisecond, true
	if d := c.delay(); d != 5*time.Millisecond {
		t.Fatalf("progress_delay=5ms gave %v", d)
	}
	t.Logf("UCX %d.%d: progress delay over shared memory %v", major, minor, got)
}
