package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/custody-dev/custody/client"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/internal/cluster"
	"github.com/custody-dev/custody/internal/drive"
	"github.com/custody-dev/custody/sdk/plugin/agent"
)

// e2eConfig is what `custody bench --e2e` measures.
type e2eConfig struct {
	custody     string // the custody binary the hosts run
	reference   string // runs the in-process reference (drive.ReferenceProgram)
	transport   string // fake or ucx
	params      map[string]string
	pulls       int           // sequential pulls measured (after warm-up)
	concurrency int           // requests in flight for the throughput run
	duration    time.Duration // length of the throughput run
	blockSize   int
	// poll, when positive, gathers finished reports by calling GetFinished
	// at this interval instead of WatchFinished: the old way, for comparison.
	poll time.Duration
}

// check refuses flags out of range and fills in the custody binary.
func (c *e2eConfig) check() error {
	switch {
	case c.transport != "fake" && c.transport != "ucx":
		return fmt.Errorf("--transport %q: want fake or ucx", c.transport)
	case c.pulls < 1:
		return fmt.Errorf("--pulls %d must be at least 1", c.pulls)
	case c.concurrency < 1 || c.concurrency > 4096:
		return fmt.Errorf("--concurrency %d must be in [1, 4096]", c.concurrency)
	case c.duration <= 0:
		return fmt.Errorf("--duration %v must be positive", c.duration)
	case c.poll < 0:
		return fmt.Errorf("--poll %v must not be negative", c.poll)
	case c.blockSize < 1 || c.blockSize > 1<<30:
		return fmt.Errorf("--block-size %d must be in [1, %d]", c.blockSize, 1<<30)
	}
	if c.custody == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		c.custody = exe
	}
	return nil
}

// fakeFence makes the fake copy as the initiator unless the parameters name
// a fence (fakeInitiated), and returns a line saying so (or "").
func (c *e2eConfig) fakeFence() string {
	var added bool
	if c.params, added = fakeInitiated(c.transport, c.params); added {
		return "fake: fence=initiated, so that the reader's agent copies in the hosts and in the in-process reference alike (under fence=incoming the owner's process copies: a socket round trip per chunk between processes, a direct call within one); --param fence=incoming measures that"
	}
	return ""
}

// e2eWarmup pulls precede every measured run: the handshake, page faults.
const e2eWarmup = 20

// runE2E starts a prefill and a decode host as the demo does and measures,
// in one run: sequential one-block pull latency from Read to the finished
// report on decode's stream; pulls per second with cfg.concurrency in
// flight; and the references, the same transport driven directly in this
// process and a bare gRPC unary round trip over a unix socket between two
// processes.
func runE2E(ctx context.Context, out io.Writer, cfg e2eConfig) (err error) {
	note := cfg.fakeFence()
	dir, err := os.MkdirTemp(agent.Dir(), "custody-bench-e2e-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	rtt, err := grpcRTT(ctx, cfg.custody, dir, max(cfg.pulls, 200))
	if err != nil {
		return fmt.Errorf("bare gRPC reference: %w", err)
	}
	params := map[string]string{}
	maps.Copy(params, cfg.params)
	if cfg.transport == "fake" {
		params["dir"] = dir
	}
	inproc, err := drive.RunPull(ctx, cfg.reference, drive.Reference{Transport: cfg.transport, Params: params,
		Dir: dir, BlockSize: cfg.blockSize, N: max(cfg.pulls, 200), Warmup: e2eWarmup})
	if err != nil {
		return fmt.Errorf("in-process reference: %w", err)
	}

	pair, err := cluster.StartPair(ctx, cluster.PairOptions{Custody: cfg.custody, Transport: cfg.transport, Params: cfg.params,
		Dir: dir, Blocks: 2 * max(cfg.concurrency, 1), BlockSize: cfg.blockSize})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, pair.Stop()) }()
	pw, dw := newReports(ctx, pair.Prefill.Client, cfg.poll), newReports(ctx, pair.Decode.Client, cfg.poll)
	defer pw.stop()
	defer dw.stop()
	b := &e2eBench{pair: pair, pw: pw, dw: dw}
	if err := b.prepare(ctx, max(cfg.concurrency, 1)); err != nil {
		return err
	}
	if _, err := b.sequential(ctx, "warm", e2eWarmup); err != nil {
		return err
	}
	hosts0, engine0, err := pairCost(pair)
	if err != nil {
		return err
	}
	seq, err := b.sequential(ctx, "seq", cfg.pulls)
	if err != nil {
		return err
	}
	hosts1, engine1, err := pairCost(pair)
	if err != nil {
		return err
	}
	hosts, engine := hosts1.sub(hosts0), engine1.sub(engine0)
	rate, err := b.concurrent(ctx, cfg.concurrency, cfg.duration)
	if err != nil {
		return err
	}

	fmt.Fprintf(out, "custody bench --e2e: transport %s, params %v, %d B blocks\n", cfg.transport, cfg.params, cfg.blockSize)
	if note != "" {
		fmt.Fprintln(out, note)
	}
	if cfg.poll > 0 {
		fmt.Fprintf(out, "finished reports: GetFinished polled every %v (--poll), not the stream\n", cfg.poll)
	}
	fmt.Fprintf(out, "method: two `custody serve` hosts (prefill, decode) on the engine API over unix sockets; a pull is ExpectSend on prefill, then Read of one block on decode (notify_producer), timed from Read until its finished report arrives on decode's WatchFinished stream; the producer's finished report is awaited before the next pull. %d warm-up pulls first. Throughput: %d requests kept in flight for %v. References in the same run: the same transport with two agents in one process (custody-bench-ref), Post READ of one block then Poll in a loop until DONE; and a bare gRPC unary call (health Check) over a unix socket to another process, with the engine API's gRPC options (flow-control windows set, so no bandwidth-delay pings) on both ends.\n",
		e2eWarmup, cfg.concurrency, cfg.duration)
	fmt.Fprintf(out, "e2e pull latency      p50 %s  p99 %s  (%d pulls)\n", us(pct(seq, 50)), us(pct(seq, 99)), len(seq))
	n := time.Duration(len(seq))
	fmt.Fprintf(out, "e2e cost per pull     hosts and transports CPU %s  switches %.1f;  engine (this process) CPU %s  switches %.1f  (the sequential pulls, spinning included; every thread's schedstat and context switches in /proc)\n",
		us(hosts.cpu/n), float64(hosts.switches)/float64(n), us(engine.cpu/n), float64(engine.switches)/float64(n))
	fmt.Fprintf(out, "e2e pulls/s at %-3d    %.0f\n", cfg.concurrency, rate)
	fmt.Fprintf(out, "in-process Post→DONE  p50 %s  p99 %s\n", us(pct(inproc, 50)), us(pct(inproc, 99)))
	fmt.Fprintf(out, "bare gRPC unary RTT   p50 %s  p99 %s\n", us(pct(rtt, 50)), us(pct(rtt, 99)))
	value, target := pct(seq, 50), pct(inproc, 50)+2*pct(rtt, 50)
	fmt.Fprintf(out, "goal name=e2e-pull-p50 value=%s target=%s met=%s\n", us(value), us(target), yesNo(value <= target))
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// us formats d in microseconds.
func us(d time.Duration) string { return fmt.Sprintf("%.1fus", float64(d)/float64(time.Microsecond)) }

// pct is the p-th percentile of ds (nearest rank).
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}

// e2eBench is the two hosts and the blocks each worker pulls: worker w
// reads prefill block src[w] into decode block dst[w].
type e2eBench struct {
	pair     *cluster.Pair
	pw, dw   *reports
	src, dst []uint32
	seq      atomic.Uint64
}

func (b *e2eBench) prepare(ctx context.Context, n int) error {
	var err error
	if b.src, err = b.pair.Prefill.Client.Alloc(ctx, b.pair.Prefill.Pool, n); err != nil {
		return fmt.Errorf("prefill: alloc %d blocks: %w", n, err)
	}
	if b.dst, err = b.pair.Decode.Client.Alloc(ctx, b.pair.Decode.Pool, n); err != nil {
		return fmt.Errorf("decode: alloc %d blocks: %w", n, err)
	}
	return nil
}

// pull runs one pull with worker w's blocks and returns the time from Read
// to decode's finished report; it returns once prefill's report arrived too.
func (b *e2eBench) pull(ctx context.Context, prefix string, w int) (time.Duration, error) {
	id := fmt.Sprintf("%s-%d", prefix, b.seq.Add(1))
	sent, recv := b.pw.expect(id), b.dw.expect(id)
	p, d := b.pair.Prefill, b.pair.Decode
	token := client.NewToken()
	if err := p.Client.ExpectSend(ctx, id, token, "", p.Pool, b.src[w:w+1], 1, time.Minute); err != nil {
		return 0, fmt.Errorf("%s: prefill: expect send: %w", id, err)
	}
	var start time.Time
	for {
		start = time.Now()
		err := d.Client.Read(ctx, id, token, "prefill", true, client.Part{Pool: d.Pool, Local: b.dst[w : w+1], Remote: b.src[w : w+1]})
		if err == nil {
			break
		}
		if !errors.Is(err, client.ErrUnavailable) { // the peer's handshake runs
			return 0, fmt.Errorf("%s: decode: read: %w", id, err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Millisecond): // pacing while the handshake runs
		}
	}
	var took time.Duration
	for i, ch := range []<-chan string{recv, sent} {
		select {
		case reason := <-ch:
			if i == 0 {
				took = time.Since(start)
			}
			if reason != "" {
				return 0, fmt.Errorf("%s failed: %s", id, reason)
			}
		case <-ctx.Done():
			return 0, fmt.Errorf("%s: no finished report: %w", id, ctx.Err())
		}
	}
	return took, nil
}

func (b *e2eBench) sequential(ctx context.Context, prefix string, n int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for range n {
		d, err := b.pull(ctx, prefix, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// concurrent keeps n pulls in flight for d and returns pulls per second.
func (b *e2eBench) concurrent(ctx context.Context, n int, d time.Duration) (float64, error) {
	var done atomic.Int64
	errc := make(chan error, n)
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if _, err := b.pull(ctx, "conc", w); err != nil {
					errc <- err
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	close(errc)
	if err := <-errc; err != nil {
		return 0, err
	}
	return float64(done.Load()) / el.Seconds(), nil
}

// reports watches one host's finished reports and hands each request's
// outcome ("" for success, else the reason) to whoever expects it.
type reports struct {
	mu      sync.Mutex
	waiters map[string]chan string
	early   map[string]string
	cancel  context.CancelFunc
	done    chan struct{}
}

func newReports(ctx context.Context, c *client.Client, poll time.Duration) *reports {
	ctx, cancel := context.WithCancel(ctx)
	r := &reports{waiters: map[string]chan string{}, early: map[string]string{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		if poll > 0 {
			t := time.NewTicker(poll)
			defer t.Stop()
			for ctx.Err() == nil {
				if f, err := c.GetFinished(ctx); err == nil {
					r.deliver(f)
				}
				select {
				case <-ctx.Done():
				case <-t.C:
				}
			}
			return
		}
		for ctx.Err() == nil {
			_ = c.WatchFinished(ctx, func(f client.Finished) error { r.deliver(f); return nil })
		}
	}()
	return r
}

func (r *reports) stop() { r.cancel(); <-r.done }

func (r *reports) expect(id string) <-chan string {
	ch := make(chan string, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if reason, ok := r.early[id]; ok {
		delete(r.early, id)
		ch <- reason
		return ch
	}
	r.waiters[id] = ch
	return ch
}

func (r *reports) deliver(f client.Finished) {
	r.mu.Lock()
	defer r.mu.Unlock()
	failed := map[string]string{}
	for _, x := range f.Failed {
		failed[x.Request] = x.Reason
	}
	report := func(id string) {
		reason, bad := failed[id]
		if !bad {
			reason = ""
		} else if reason == "" {
			reason = "failed"
		}
		delete(failed, id)
		if ch, ok := r.waiters[id]; ok {
			delete(r.waiters, id)
			ch <- reason
			return
		}
		r.early[id] = reason
	}
	for _, id := range f.FinishedSending {
		report(id)
	}
	for _, id := range f.FinishedRecving {
		report(id)
	}
	for id := range failed {
		report(id)
	}
}

// grpcRTT measures n bare gRPC unary calls (health Check) to a server in
// another process (custody bench-echo) over a unix socket.
func grpcRTT(ctx context.Context, custody, dir string, n int) ([]time.Duration, error) {
	sock := filepath.Join(dir, "echo.sock")
	srv := exec.CommandContext(ctx, custody, "bench-echo", sock)
	srv.Stderr = os.Stderr
	stdin, err := srv.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := srv.Start(); err != nil {
		return nil, err
	}
	defer func() { _ = stdin.Close(); _ = srv.Wait() }()
	conn, err := grpc.NewClient("unix://"+sock, client.DialOptions()...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// Wait for the server: the first call waits until the socket answers.
	if _, err := hc.Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		return nil, fmt.Errorf("echo server: %w", err)
	}
	out := make([]time.Duration, 0, n)
	for range n + e2eWarmup {
		start := time.Now()
		if _, err := hc.Check(cctx, &healthpb.HealthCheckRequest{}); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out[e2eWarmup:], nil
}

func init() {
	rootCmd.AddCommand(&cobra.Command{
		Use:    "bench-echo SOCKET",
		Short:  "serve a bare gRPC health service on a unix socket until stdin closes (the reference of bench --e2e)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ln, err := net.Listen("unix", args[0])
			if err != nil {
				return err
			}
			s := grpc.NewServer(host.EngineServerOptions()...)
			healthpb.RegisterHealthServer(s, health.NewServer())
			go func() { _, _ = io.Copy(io.Discard, os.Stdin); s.Stop() }()
			return s.Serve(ln)
		},
	})
}
