package bench

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
	"github.com/custody-dev/custody/internal/proccost"
	"github.com/custody-dev/custody/sdk/plugin"
	"github.com/custody-dev/custody/sdk/plugin/agent"
)

// Goals of the process boundary: Post to DONE through it at most twice
// the in-process time at the median, and at least 0.8 of the in-process
// completion rate.
const (
	sdkGoalPostDone    = 2.0
	sdkGoalCompletions = 0.8
)

// SDKConfig is what `custody bench sdk` measures.
type SDKConfig struct {
	// Plugin is the transport binary; Params its parameters.
	Plugin string
	Params map[string]string
	// Reference runs the in-process way (drive.ReferenceProgram).
	Reference string
	// Rounds are per figure; a round measures every way.
	Rounds
	// Idle, when positive, also measures over this long the CPU an idle
	// transport process and this process use with the rings attached.
	Idle time.Duration
}

// sdkWay is one way to drive the transport: measure starts two agents,
// measures them (drive.MeasureSDK) and ends them.
type sdkWay struct {
	name    string
	measure func(ctx context.Context) (drive.SDKResult, error)
}

// SDK measures what the process boundary costs on the hot path. The same
// transport is driven three ways in one run: in one process (its package,
// no boundary: custody-bench-ref, so that custody links no transport), as
// plugin processes through the shared-memory rings, and as plugin
// processes over gRPC alone. Each way runs two agents, A and B, and A
// WRITEs 4 KiB descriptors of its region into B's.
func SDK(ctx context.Context, out io.Writer, cfg SDKConfig) error {
	if tls := cfg.Params["tls"]; tls != "" {
		// The plugin's Describe (before Open) reads it, as in-process
		// agents do.
		if err := os.Setenv("UCX_TLS", tls); err != nil {
			return err
		}
	}
	launchWay := func(name string, off bool) sdkWay {
		start := agent.Launch(cfg.Plugin, plugin.LaunchOptions{DisableRings: off, ReleaseTerminal: !off})
		return sdkWay{name: name, measure: func(ctx context.Context) (drive.SDKResult, error) {
			return drive.MeasureSDK(ctx, start, cfg.Params, cfg.MinTime)
		}}
	}
	name, err := TransportName(ctx, cfg.Plugin)
	if err != nil {
		return err
	}
	var added bool
	if cfg.Params, added = fakeInitiated(name, cfg.Params); added {
		fmt.Fprintln(out, "fake: fence=initiated, so that A copies in every way (under fence=incoming B's process copies, a socket round trip per chunk out of process and a call in process); --param fence=incoming measures that")
	}
	ways := []sdkWay{
		{name: "in-process", measure: func(ctx context.Context) (drive.SDKResult, error) {
			return drive.RunSDK(ctx, cfg.Reference, drive.Reference{Transport: name, Params: cfg.Params, MinTime: cfg.MinTime})
		}},
		launchWay("rings", false),
		launchWay("grpc", true),
	}
	best := make([]drive.SDKResult, len(ways))
	for round := range max(1, cfg.Repeat) {
		for i, w := range ways {
			r, err := w.measure(ctx)
			if err != nil {
				return fmt.Errorf("bench sdk %s (round %d): %w", w.name, round+1, err)
			}
			if round == 0 || r.P50 < best[i].P50 {
				best[i].P50, best[i].P99 = r.P50, r.P99
			}
			best[i].Rate = max(best[i].Rate, r.Rate)
		}
	}
	fmt.Fprintf(out, "custody bench --sdk: transport %s (%s), params %v\n", name, filepath.Base(cfg.Plugin), cfg.Params)
	fmt.Fprintf(out, "method: two agents A and B per way; A WRITEs %d B descriptors into B's region. latency: Post of one transfer, then Poll until DONE (spinning), then Release (not timed), at least %v; p50/p99 of the Post-to-DONE times. rate: %d transfers kept in flight; completions taken from Events (EventSource) or Poll, waiting on Wake when the transport is a Waker and spinning otherwise; each batch released and posted again (one call each), at least %v. The rings way runs as a host does, with release at terminal: the plugin releases each handle as it reports it terminal, and Release is answered from that. %d rounds interleave the ways; each figure is the best of its rounds.\n",
		drive.SDKSize, cfg.MinTime, drive.SDKDepth, cfg.MinTime, max(1, cfg.Repeat))
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "way\tpost->done p50 µs\tp99 µs\tcompletions/s\t")
	for i, w := range ways {
		r := best[i]
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.0f\t\n", w.name, micros(r.P50), micros(r.P99), r.Rate)
	}
	_ = tw.Flush()
	in, rings, grpc := best[0], best[1], best[2]
	fmt.Fprintf(out, "ratio name=grpc-post-done-p50-ratio value=%.2f\n", float64(grpc.P50)/float64(in.P50))
	fmt.Fprintf(out, "ratio name=grpc-completions-ratio value=%.3f\n", grpc.Rate/in.Rate)
	goal(out, "sdk-post-done-p50-ratio", float64(rings.P50)/float64(in.P50), sdkGoalPostDone, false)
	goal(out, "sdk-completions-ratio", rings.Rate/in.Rate, sdkGoalCompletions, true)
	if cfg.Idle > 0 {
		return sdkIdleCPU(ctx, out, cfg)
	}
	return nil
}

// sdkGoalIdleCPU is the most an idle process may use: half a percent of a
// core.
const sdkGoalIdleCPU = 0.005

// sdkIdleCPU launches an agent with the rings attached, lets it sit idle for
// cfg.Idle, and prints what the transport process and this process used
// of a core meanwhile (their process CPU clocks).
func sdkIdleCPU(ctx context.Context, out io.Writer, cfg SDKConfig) (err error) {
	a, err := agent.Open(ctx, agent.Launch(cfg.Plugin, plugin.LaunchOptions{}), "sdk-bench-idle", cfg.Params)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, a.Close(ctx)) }()
	p := a.Transport.(*plugin.Plugin)
	if !p.Rings() {
		fmt.Fprintln(out, "idle: the transport does not offer rings; idle figures are of gRPC alone")
	}
	_ = p.Wake()                       // a host that sleeps on Wake, as a real one does
	time.Sleep(100 * time.Millisecond) // let start-up work end before measuring
	t0 := time.Now()
	pBefore, err1 := proccost.Threads(p.Pid())
	hBefore, err2 := proccost.Threads(os.Getpid())
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	time.Sleep(cfg.Idle)
	pAfter, err1 := proccost.Threads(p.Pid())
	hAfter, err2 := proccost.Threads(os.Getpid())
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	el := time.Since(t0)
	goal(out, "sdk-idle-transport-cpu", float64(pAfter.CPU-pBefore.CPU)/float64(el), sdkGoalIdleCPU, false)
	goal(out, "sdk-idle-host-cpu", float64(hAfter.CPU-hBefore.CPU)/float64(el), sdkGoalIdleCPU, false)
	return nil
}
