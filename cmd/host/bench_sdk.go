package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/custody-dev/custody/internal/drive"
	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
)

// `custody bench --sdk`: what the process boundary costs on the hot path.
// The same transport is driven three ways in one run: in one process (its
// package, no boundary: custody-bench-ref, so that custody links no
// transport), as plugin processes through the shared-memory rings, and as
// plugin processes over gRPC alone. Each way runs two agents,
// A and B, and A WRITEs 4 KiB descriptors of its region into B's.

// Goals of the process boundary: Post to DONE through
// it at most twice the in-process time at the median, and at least 0.8 of
// the in-process completion rate.
const (
	sdkGoalPostDone    = 2.0
	sdkGoalCompletions = 0.8
)

type sdkBenchConfig struct {
	plugin string
	// reference runs the in-process way (drive.ReferenceProgram).
	reference string
	params    map[string]string
	minTime   time.Duration
	repeat    int
	idle      time.Duration // 0: do not measure idle CPU
}

// sdkWay is one way to drive the transport: measure starts two agents,
// measures them (drive.MeasureSDK) and ends them.
type sdkWay struct {
	name    string
	measure func(ctx context.Context) (drive.SDKResult, error)
}

func runSDKBench(ctx context.Context, out io.Writer, cfg sdkBenchConfig) error {
	if tls := cfg.params["tls"]; tls != "" {
		// The plugin's Describe (before Open) reads it, as in-process
		// agents do.
		if err := os.Setenv("UCX_TLS", tls); err != nil {
			return err
		}
	}
	launchWay := func(name string, off bool) sdkWay {
		start := func(ctx context.Context) (sdk.Transport, func(), error) {
			p, err := plugin.Launch(ctx, cfg.plugin, plugin.LaunchOptions{DisableRings: off, ReleaseTerminal: !off})
			if err != nil {
				return nil, nil, err
			}
			return p, p.Stop, nil
		}
		return sdkWay{name: name, measure: func(ctx context.Context) (drive.SDKResult, error) {
			return drive.MeasureSDK(ctx, start, cfg.params, cfg.minTime)
		}}
	}
	// Which transport is it? Its Describe says.
	probe, err := plugin.Launch(ctx, cfg.plugin, plugin.LaunchOptions{})
	if err != nil {
		return err
	}
	name := probe.Description().Name
	probe.Stop()
	var added bool
	if cfg.params, added = fakeInitiated(name, cfg.params); added {
		fmt.Fprintln(out, "fake: fence=initiated, so that A copies in every way (under fence=incoming B's process copies, a socket round trip per chunk out of process and a call in process); --param fence=incoming measures that")
	}
	ways := []sdkWay{
		{name: "in-process", measure: func(ctx context.Context) (drive.SDKResult, error) {
			return drive.RunSDK(ctx, cfg.reference, drive.Reference{Transport: name, Params: cfg.params, MinTime: cfg.minTime})
		}},
		launchWay("rings", false),
		launchWay("grpc", true),
	}
	best := make([]drive.SDKResult, len(ways))
	for round := range max(1, cfg.repeat) {
		for i, w := range ways {
			r, err := w.measure(ctx)
			if err != nil {
				return fmt.Errorf("bench --sdk %s (round %d): %w", w.name, round+1, err)
			}
			if round == 0 || r.P50 < best[i].P50 {
				best[i].P50, best[i].P99 = r.P50, r.P99
			}
			best[i].Rate = max(best[i].Rate, r.Rate)
		}
	}
	fmt.Fprintf(out, "custody bench --sdk: transport %s (%s), params %v\n", name, filepath.Base(cfg.plugin), cfg.params)
	fmt.Fprintf(out, "method: two agents A and B per way; A WRITEs %d B descriptors into B's region. latency: Post of one transfer, then Poll until DONE (spinning), then Release (not timed), at least %v; p50/p99 of the Post-to-DONE times. rate: %d transfers kept in flight; completions taken from Events (EventSource) or Poll, waiting on Wake when the transport is a Waker and spinning otherwise; each batch released and posted again (one call each), at least %v. The rings way runs as a host does, with release at terminal: the plugin releases each handle as it reports it terminal, and Release is answered from that. %d rounds interleave the ways; each figure is the best of its rounds.\n",
		drive.SDKSize, cfg.minTime, drive.SDKDepth, cfg.minTime, max(1, cfg.repeat))
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "way\tpost->done p50 µs\tp99 µs\tcompletions/s\t")
	for i, w := range ways {
		r := best[i]
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.0f\t\n", w.name, sdkMicros(r.P50), sdkMicros(r.P99), r.Rate)
	}
	_ = tw.Flush()
	in, rings, grpc := best[0], best[1], best[2]
	fmt.Fprintf(out, "ratio name=grpc-post-done-p50-ratio value=%.2f\n", float64(grpc.P50)/float64(in.P50))
	fmt.Fprintf(out, "ratio name=grpc-completions-ratio value=%.3f\n", grpc.Rate/in.Rate)
	sdkGoal(out, "sdk-post-done-p50-ratio", float64(rings.P50)/float64(in.P50), sdkGoalPostDone, false)
	sdkGoal(out, "sdk-completions-ratio", rings.Rate/in.Rate, sdkGoalCompletions, true)
	if cfg.idle > 0 {
		return sdkIdleCPU(ctx, out, cfg)
	}
	return nil
}

// sdkGoalIdleCPU is the most an idle process may use: half a percent of a
// core.
const sdkGoalIdleCPU = 0.005

// sdkIdleCPU launches an agent with the rings attached, lets it sit idle for
// cfg.idle, and prints what the transport process and this process used
// of a core meanwhile (from /proc/PID/task/*/schedstat: time on CPU).
func sdkIdleCPU(ctx context.Context, out io.Writer, cfg sdkBenchConfig) (err error) {
	p, err := plugin.Launch(ctx, cfg.plugin, plugin.LaunchOptions{})
	if err != nil {
		return err
	}
	defer p.Stop()
	if err := p.Open(ctx, sdk.OpenRequest{Agent: "sdk-bench-idle", Params: cfg.params}); err != nil {
		return fmt.Errorf("Open: %w", err)
	}
	defer func() { err = errors.Join(err, p.Close(ctx)) }()
	if !p.Rings() {
		fmt.Fprintln(out, "idle: the transport does not offer rings; idle figures are of gRPC alone")
	}
	_ = p.Wake()                       // a host that sleeps on Wake, as a real one does
	time.Sleep(100 * time.Millisecond) // let start-up work end before measuring
	t0 := time.Now()
	pBefore, err1 := sdkCPUTime(p.Pid())
	hBefore, err2 := sdkCPUTime(os.Getpid())
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	time.Sleep(cfg.idle)
	pAfter, err1 := sdkCPUTime(p.Pid())
	hAfter, err2 := sdkCPUTime(os.Getpid())
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	el := time.Since(t0)
	sdkGoal(out, "sdk-idle-transport-cpu", float64(pAfter-pBefore)/float64(el), sdkGoalIdleCPU, false)
	sdkGoal(out, "sdk-idle-host-cpu", float64(hAfter-hBefore)/float64(el), sdkGoalIdleCPU, false)
	return nil
}

// sdkCPUTime is the time all threads of process pid have spent on a CPU.
func sdkCPUTime(pid int) (time.Duration, error) {
	dirs, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(dirs) == 0 {
		return 0, fmt.Errorf("CPU time of pid %d: no /proc/%d/task/*/schedstat (%v)", pid, pid, err)
	}
	var total time.Duration
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		var ns int64
		if _, err := fmt.Sscan(string(b), &ns); err == nil {
			total += time.Duration(ns)
		}
	}
	return total, nil
}

func sdkMicros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// sdkGoal prints a goal line; atLeast says whether the value must reach the
// target from below (else stay under it).
func sdkGoal(out io.Writer, name string, value, target float64, atLeast bool) {
	met := value <= target
	if atLeast {
		met = value >= target
	}
	yes := "no"
	if met {
		yes = "yes"
	}
	fmt.Fprintf(out, "goal name=%s value=%.3f target=%g met=%s\n", name, value, target, yes)
}
