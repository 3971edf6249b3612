package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/custody-dev/custody/client"
	"github.com/custody-dev/custody/host"
)

// EchoCommand is the hidden custody subcommand that serves the bare gRPC
// reference (ServeEcho): custody runs it as `custody EchoCommand SOCKET`.
const EchoCommand = "bench-echo"

// ServeEcho serves a bare gRPC health service on a unix socket at path,
// with the engine API's server options, until stop reaches its end: the
// other process of the bare gRPC reference of E2E.
func ServeEcho(path string, stop io.Reader) error {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	s := grpc.NewServer(host.EngineServerOptions()...)
	healthpb.RegisterHealthServer(s, health.NewServer())
	go func() { _, _ = io.Copy(io.Discard, stop); s.Stop() }()
	return s.Serve(ln)
}

// grpcRTT measures n bare gRPC unary calls (health Check) to a server in
// another process (custody EchoCommand) over a unix socket: the time of
// each, and what this process (the client) and the server used over them.
func grpcRTT(ctx context.Context, custody, dir string, n int) ([]time.Duration, costRows, error) {
	sock := filepath.Join(dir, "echo.sock")
	srv := exec.CommandContext(ctx, custody, EchoCommand, sock)
	srv.Stderr = os.Stderr
	stdin, err := srv.StdinPipe()
	if err != nil {
		return nil, costRows{}, err
	}
	if err := srv.Start(); err != nil {
		return nil, costRows{}, err
	}
	defer func() { _ = stdin.Close(); _ = srv.Wait() }()
	conn, err := grpc.NewClient("unix://"+sock, client.DialOptions()...)
	if err != nil {
		return nil, costRows{}, err
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// Wait for the server: the first call waits until the socket answers.
	if _, err := hc.Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		return nil, costRows{}, fmt.Errorf("echo server: %w", err)
	}
	calls := func(n int) ([]time.Duration, error) {
		out := make([]time.Duration, 0, n)
		for range n {
			start := time.Now()
			if _, err := hc.Check(cctx, &healthpb.HealthCheckRequest{}); err != nil {
				return nil, err
			}
			out = append(out, time.Since(start))
		}
		return out, nil
	}
	if _, err := calls(e2eWarmup); err != nil {
		return nil, costRows{}, err
	}
	var out []time.Duration
	cost, err := costOf([]costRow{{name: "client (this process)", pids: []int{os.Getpid()}}, {name: "server", pids: []int{srv.Process.Pid}}},
		func() (err error) { out, err = calls(n); return err })
	return out, cost, err
}
