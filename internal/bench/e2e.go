package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"time"

	"github.com/custody-dev/custody/internal/cluster"
	"github.com/custody-dev/custody/internal/drive"
	"github.com/custody-dev/custody/sdk/plugin/agent"
)

// e2eWarmup pulls precede every measured run: the handshake, page faults.
const e2eWarmup = 20

// e2eReferenceN is the least number of times each reference of E2E is
// measured.
const e2eReferenceN = 200

// HostsConfig is how the host benchmarks (E2E, Ranks) run their hosts and
// pull through them.
type HostsConfig struct {
	// Custody is the custody binary the hosts run (default: this one).
	Custody string
	// Transport is the hosts' transport, fake or ucx; Params its
	// parameters.
	Transport string
	Params    map[string]string
	// Concurrency is the requests in flight for the throughput run, of
	// Duration.
	Concurrency int
	Duration    time.Duration
	// BlockSize is the bytes per block.
	BlockSize int
	// Poll, when positive, gathers finished reports by calling GetFinished
	// at this interval instead of WatchFinished: the old way, for
	// comparison.
	Poll time.Duration
}

// Check refuses values out of range, naming the flag, and fills in the
// custody binary.
func (c *HostsConfig) Check() error {
	switch {
	case c.Transport != "fake" && c.Transport != "ucx":
		return fmt.Errorf("--transport %q: want fake or ucx", c.Transport)
	case c.Concurrency < 1 || c.Concurrency > 4096:
		return fmt.Errorf("--concurrency %d must be in [1, 4096]", c.Concurrency)
	case c.Duration <= 0:
		return fmt.Errorf("--duration %v must be positive", c.Duration)
	case c.Poll < 0:
		return fmt.Errorf("--poll %v must not be negative", c.Poll)
	case c.BlockSize < 1 || c.BlockSize > 1<<30:
		return fmt.Errorf("--block-size %d must be in [1, %d]", c.BlockSize, 1<<30)
	}
	if c.Custody == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		c.Custody = exe
	}
	return nil
}

// E2EConfig is what `custody bench e2e` measures.
type E2EConfig struct {
	HostsConfig
	// Reference runs the in-process reference (drive.ReferenceProgram).
	Reference string
	// Pulls is the sequential pulls measured, after the warm-up.
	Pulls int
}

// Check is HostsConfig.Check, and refuses fewer than one pull.
func (c *E2EConfig) Check() error {
	if err := c.HostsConfig.Check(); err != nil {
		return err
	}
	if c.Pulls < 1 {
		return fmt.Errorf("--pulls %d must be at least 1", c.Pulls)
	}
	return nil
}

// fakeFence makes the fake copy as the initiator unless the parameters name
// a fence (fakeInitiated), and returns a line saying so (or "").
func (c *HostsConfig) fakeFence() string {
	var added bool
	if c.Params, added = fakeInitiated(c.Transport, c.Params); added {
		return "fake: fence=initiated, so that the reader's agent copies in the hosts and in the in-process reference alike (under fence=incoming the owner's process copies: a socket round trip per chunk between processes, a direct call within one); --param fence=incoming measures that"
	}
	return ""
}

// E2E starts a prefill and a decode host as the demo does and measures,
// in one run: sequential one-block pull latency from Read to the finished
// report on decode's stream; pulls per second with cfg.Concurrency in
// flight; and the references, the same transport driven directly in this
// process and a bare gRPC unary round trip over a unix socket between two
// processes.
func E2E(ctx context.Context, out io.Writer, cfg E2EConfig) (err error) {
	note := cfg.fakeFence()
	dir, err := os.MkdirTemp(agent.Dir(), "custody-bench-e2e-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	refN := max(cfg.Pulls, e2eReferenceN)
	rtt, rttCost, err := grpcRTT(ctx, cfg.Custody, dir, refN)
	if err != nil {
		return fmt.Errorf("bare gRPC reference: %w", err)
	}
	params := maps.Clone(cfg.Params)
	if params == nil {
		params = map[string]string{}
	}
	if cfg.Transport == "fake" {
		params["dir"] = dir
	}
	inproc, err := drive.RunPull(ctx, cfg.Reference, drive.Reference{Transport: cfg.Transport, Params: params,
		Dir: dir, BlockSize: cfg.BlockSize, N: refN, Warmup: e2eWarmup})
	if err != nil {
		return fmt.Errorf("in-process reference: %w", err)
	}

	pair, err := cluster.StartPair(ctx, cluster.PairOptions{Custody: cfg.Custody, Transport: cfg.Transport, Params: cfg.Params,
		Dir: dir, Blocks: 2 * max(cfg.Concurrency, 1), BlockSize: cfg.BlockSize})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, pair.Stop()) }()
	e := newEngines(ctx, []*cluster.Host{pair.Prefill}, []*cluster.Host{pair.Decode}, cfg.Poll, dir)
	defer e.stop()
	if err := e.prepare(ctx, max(cfg.Concurrency, 1)); err != nil {
		return err
	}
	if _, _, err := e.sequential(ctx, "warm", e2eWarmup); err != nil {
		return err
	}
	rows, err := pullRows(pair.Decode, pair.Prefill)
	if err != nil {
		return err
	}
	var seq, reads []time.Duration
	pullCost, err := costOf(rows, func() (err error) { seq, reads, err = e.sequential(ctx, "seq", cfg.Pulls); return err })
	if err != nil {
		return err
	}
	conc, el, err := e.concurrent(ctx, cfg.Concurrency, cfg.Duration)
	if err != nil {
		return err
	}
	rate := float64(len(conc)) / el.Seconds()

	fmt.Fprintf(out, "custody bench --e2e: transport %s, params %v, %d B blocks\n", cfg.Transport, cfg.Params, cfg.BlockSize)
	if note != "" {
		fmt.Fprintln(out, note)
	}
	if cfg.Poll > 0 {
		fmt.Fprintf(out, "finished reports: GetFinished polled every %v (--poll), not the stream\n", cfg.Poll)
	}
	fmt.Fprintf(out, "method: two `custody serve` hosts (prefill, decode) on the engine API over unix sockets; a pull is ExpectSend on prefill, then Read of one block on decode (notify_producer), timed from Read until its finished report arrives on decode's WatchFinished stream; the producer's finished report is awaited before the next pull. %d warm-up pulls first. Throughput: %d requests kept in flight for %v. References in the same run: the same transport with two agents in one process (custody-bench-ref), Post READ of one block then Poll in a loop until DONE; and a bare gRPC unary call (health Check) over a unix socket to another process, with the engine API's gRPC options (flow-control windows set, so no bandwidth-delay pings) on both ends.\n",
		e2eWarmup, cfg.Concurrency, cfg.Duration)
	fmt.Fprintf(out, "e2e pull latency      p50 %s  p99 %s  (%d pulls)\n", us(pct(seq, 50)), us(pct(seq, 99)), len(seq))
	fmt.Fprintf(out, "e2e read call         p50 %s  p99 %s  (from Read until it returned: the part of the pull in the Read call)\n", us(pct(reads, 50)), us(pct(reads, 99)))
	fmt.Fprintf(out, "e2e pulls/s at %-3d    %.0f\n", cfg.Concurrency, rate)
	fmt.Fprintf(out, "in-process Post→DONE  p50 %s  p99 %s\n", us(pct(inproc.Pulls, 50)), us(pct(inproc.Pulls, 99)))
	fmt.Fprintf(out, "bare gRPC unary RTT   p50 %s  p99 %s\n", us(pct(rtt, 50)), us(pct(rtt, 99)))
	value, target := pct(seq, 50), pct(inproc.Pulls, 50)+2*pct(rtt, 50)
	fmt.Fprintf(out, "goal name=e2e-pull-p50 value=%s target=%s met=%s\n", us(value), us(target), yesNo(value <= target))
	printPullCosts(out, pullCost, len(seq), rttCost, len(rtt), inproc)
	return nil
}
