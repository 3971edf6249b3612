package plugin_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/sdk/plugin"
)

// hostHelperEnv makes this test binary a host: it launches the fake
// transport (FAKE_BIN), its socket directory under SOCKET_DIR, prints the
// transport's pid, and waits to be killed. Its value says which of the two
// mechanisms the launch keeps: "both", "lifeline" (no death signal) or
// "signal" (no lifeline).
const hostHelperEnv = "CUSTODY_SDK_TEST_HOST"

func helperHost(mode string) int {
	switch mode {
	case "lifeline":
		plugin.WithoutDeathSignal()
	case "signal":
		plugin.WithoutLifeline()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A killed host cannot remove its transport's socket directory: the
	// test's own directory holds it, and goes with the test.
	p, err := plugin.Launch(ctx, os.Getenv("FAKE_BIN"), plugin.LaunchOptions{Logger: hclog.NewNullLogger(), SocketDir: os.Getenv("SOCKET_DIR")})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper host:", err)
		return 1
	}
	fmt.Printf("pid %d\n", p.Pid())
	select {} // until the test kills this host
}

// waitGone waits, by the process's pidfd, until pid has exited, or the
// deadline passes; it reports whether the process is gone.
func waitGone(t *testing.T, pidfd int, within time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		require.NoError(t, err)
		if n > 0 {
			return true // a pidfd is readable once its process exited
		}
	}
}

// TestTransportDiesWithItsHost SIGKILLs a host (a real process that
// launched the fake) and proves that its transport exits too, by each
// mechanism alone and by both: the parent death signal, and the lifeline
// that does not depend on it.
func TestTransportDiesWithItsHost(t *testing.T) {
	for _, mode := range []string{"both", "lifeline", "signal"} {
		t.Run(mode, func(t *testing.T) {
			host := exec.Command(helperBin)
			host.Env = append(os.Environ(), hostHelperEnv+"="+mode, "FAKE_BIN="+fakeBin, "SOCKET_DIR="+t.TempDir())
			out, err := host.StdoutPipe()
			require.NoError(t, err)
			host.Stderr = os.Stderr
			require.NoError(t, host.Start())
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				_ = host.Process.Kill()
				_ = host.Wait()
				t.Fatalf("helper host printed no pid: %v", err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "pid ")))
			require.NoError(t, err)
			pidfd, err := unix.PidfdOpen(pid, 0)
			require.NoError(t, err, "transport pid %d", pid)
			t.Cleanup(func() { // a transport that outlived its host must not outlive the test
				_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
				unix.Close(pidfd)
			})

			require.False(t, waitGone(t, pidfd, 0), "the transport lives while its host does")
			require.NoError(t, host.Process.Kill())
			_ = host.Wait()
			require.True(t, waitGone(t, pidfd, 10*time.Second),
				"transport pid %d outlived its SIGKILLed host (mode %s)", pid, mode)
		})
	}
}

// TestServeExitsAtOnceWhenTheHostIsAlreadyGone starts a transport binary
// whose lifeline's host end is already closed: Serve exits with the
// lifeline's status before any other work (without the lifeline check it
// would complain that it was not started by a host, status 1).
func TestServeExitsAtOnceWhenTheHostIsAlreadyGone(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	require.NoError(t, w.Close())
	cmd := exec.Command(fakeBin)
	cmd.ExtraFiles = []*os.File{r}
	cmd.Env = append(os.Environ(), plugin.EnvLifeline+"=3")
	err = cmd.Run()
	r.Close()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, plugin.LifelineExit, ee.ExitCode())
}
