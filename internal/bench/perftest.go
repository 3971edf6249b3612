package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/custody-dev/custody/internal/drive"
)

// runPerftest measures ucx_perftest -t ucp_put_bw at size between two
// processes on this host with the environment's UCX_TLS, in MiB/s (its
// "overall" bandwidth).
func runPerftest(ctx context.Context, bin string, size int, env []string) (float64, error) {
	port, err := freePort()
	if err != nil {
		return 0, err
	}
	iters := strconv.Itoa(min(100000, max(100, (2<<30)/size)))
	args := []string{"-t", "ucp_put_bw", "-s", strconv.Itoa(size), "-n", iters, "-p", strconv.Itoa(port)}
	srv := exec.CommandContext(ctx, bin, args...)
	srv.Env = append(os.Environ(), env...)
	if err := srv.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", bin, err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	// The server listens only once started: retry the client briefly.
	var out []byte
	deadline := time.Now().Add(10 * time.Second)
	for {
		cli := exec.CommandContext(ctx, bin, append([]string{"localhost"}, args...)...)
		cli.Env = append(os.Environ(), env...)
		out, err = cli.CombinedOutput()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return 0, fmt.Errorf("%s client: %v: %s", bin, err, drive.LastLine(out))
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 7 && f[0] == "Final:" {
			return strconv.ParseFloat(f[6], 64)
		}
	}
	return 0, fmt.Errorf("%s printed no Final: line: %s", bin, drive.LastLine(out))
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
