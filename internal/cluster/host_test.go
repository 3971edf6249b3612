package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/internal/testbin"
)

// envStarter, set in a re-run of this test binary, makes
// TestHostDiesWithItsStarter the process that starts the host: it names
// the directory to start it in.
const envStarter = "CUSTODY_TEST_HOST_STARTER"

// custodyBin is the custody binary, built by TestMain next to the fake
// transport so that hosts find it.
var custodyBin string

func TestMain(m *testing.M) {
	testbin.Main(m, func(dir string) { custodyBin = filepath.Join(dir, "custody") },
		"custody", "custody-transport-fake")
}

// TestHostDiesWithItsStarter: a host that the demo (or a bench) started
// stops when the process that started it dies, however that died, instead
// of serving on with nobody to stop it. A re-run of this test binary
// starts a host and is then killed with SIGKILL, which it cannot answer;
// the host must exit. Without the parent death signal the host lives on
// and the test fails at its bound.
func TestHostDiesWithItsStarter(t *testing.T) {
	if dir := os.Getenv(envStarter); dir != "" {
		h, err := StartHost(context.Background(), Spec{Name: "orphan", Dir: dir, Custody: custodyBin, Transport: "fake",
			Params: map[string]string{"dir": dir}, Cap: time.Second, Policy: "fence", Blocks: 4, BlockSize: 4096, LogLevel: "warn"})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Printf("host-pid %d\n", h.Pid())
		// Until the test kills this process; should the test end first,
		// its end of stdin closes and this starter ends with it.
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(1)
	}
	dir := t.TempDir()
	starter := exec.Command(os.Args[0], "-test.run=^TestHostDiesWithItsStarter$", "-test.count=1")
	starter.Env = append(os.Environ(), envStarter+"="+dir, testbin.EnvDir+"="+filepath.Dir(custodyBin))
	out, err := starter.StdoutPipe()
	require.NoError(t, err)
	stdin, err := starter.StdinPipe() // held open until the starter is killed
	require.NoError(t, err)
	defer stdin.Close()
	require.NoError(t, starter.Start())
	var pid int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if _, err := fmt.Sscanf(line, "host-pid %d", &pid); err == nil {
			break
		}
		if strings.HasPrefix(line, "error:") {
			_ = starter.Process.Kill()
			_ = starter.Wait()
			t.Fatalf("the starter could not start a host: %s", line)
		}
	}
	require.Positive(t, pid, "the starter never said which host it started")
	host, err := unix.PidfdOpen(pid, 0)
	require.NoError(t, err, "the host %d is gone before its starter died", pid)
	defer unix.Close(host)

	require.NoError(t, starter.Process.Kill())
	_ = starter.Wait()
	// The host's pidfd turns readable once it exited. Bound: a host
	// stops within a second of SIGTERM here; one that never got a signal
	// serves on.
	fds := []unix.PollFd{{Fd: int32(host), Events: unix.POLLIN}}
	bound := time.Now().Add(30 * time.Second)
	n, err := 0, unix.EINTR
	for err == unix.EINTR && time.Now().Before(bound) {
		n, err = unix.Poll(fds, int(time.Until(bound).Milliseconds())+1)
	}
	if n == 0 && (err == nil || err == unix.EINTR) {
		_ = unix.Kill(pid, unix.SIGKILL)
		t.Fatalf("host %d still serves 30s after the process that started it was killed", pid)
	}
	require.NoError(t, err)
}
