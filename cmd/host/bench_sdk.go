package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/custody-dev/custody/plugins/fake"
	"github.com/custody-dev/custody/plugins/ucx"
	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
)

// `custody bench --sdk`: what the process boundary costs on the hot path.
// The same transport is driven three ways in one run: in this process (its
// package, no boundary), as plugin processes through the shared-memory
// rings, and as plugin processes over gRPC alone. Each way runs two agents,
// A and B, and A WRITEs 4 KiB descriptors of its region into B's.

// sdkBenchSize is the size of one transfer; sdkBenchDepth how many are kept
// in flight for the completion rate.
const (
	sdkBenchSize  = 4 << 10
	sdkBenchDepth = 256
)

// Goals of the process boundary: Post to DONE through
// it at most twice the in-process time at the median, and at least 0.8 of
// the in-process completion rate.
const (
	sdkGoalPostDone    = 2.0
	sdkGoalCompletions = 0.8
)

// sdkInProcess makes an in-process agent of the transport a plugin binary
// serves, by the name its Describe reports.
var sdkInProcess = map[string]func() sdk.Transport{
	"fake": func() sdk.Transport { return fake.New() },
	"ucx":  func() sdk.Transport { return ucx.New() },
}

type sdkBenchConfig struct {
	plugin  string
	params  map[string]string
	minTime time.Duration
	repeat  int
	idle    time.Duration // 0: do not measure idle CPU
}

// sdkWay is one way to drive the transport.
type sdkWay struct {
	name string
	// start returns a new agent and what ends it.
	start func(ctx context.Context) (sdk.Transport, func(), error)
}

// sdkResult is what one way measured.
type sdkResult struct {
	p50, p99 time.Duration
	rate     float64 // completions per second at sdkBenchDepth in flight
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
		return sdkWay{name: name, start: func(ctx context.Context) (sdk.Transport, func(), error) {
			p, err := plugin.Launch(ctx, cfg.plugin, plugin.LaunchOptions{DisableRings: off})
			if err != nil {
				return nil, nil, err
			}
			return p, p.Stop, nil
		}}
	}
	// Which transport is it? Its Describe says.
	probe, err := plugin.Launch(ctx, cfg.plugin, plugin.LaunchOptions{})
	if err != nil {
		return err
	}
	name := probe.Description().Name
	probe.Stop()
	mk, ok := sdkInProcess[name]
	if !ok {
		return fmt.Errorf("bench --sdk: no in-process reference for transport %q (known: fake, ucx)", name)
	}
	var added bool
	if cfg.params, added = fakeInitiated(name, cfg.params); added {
		fmt.Fprintln(out, "fake: fence=initiated, so that A copies in every way (under fence=incoming B's process copies, a socket round trip per chunk out of process and a call in process); --param fence=incoming measures that")
	}
	ways := []sdkWay{
		{name: "in-process", start: func(context.Context) (sdk.Transport, func(), error) { return mk(), func() {}, nil }},
		launchWay("rings", false),
		launchWay("grpc", true),
	}
	best := make([]sdkResult, len(ways))
	for round := range max(1, cfg.repeat) {
		for i, w := range ways {
			r, err := measureSDK(ctx, w, cfg)
			if err != nil {
				return fmt.Errorf("bench --sdk %s (round %d): %w", w.name, round+1, err)
			}
			if round == 0 || r.p50 < best[i].p50 {
				best[i].p50, best[i].p99 = r.p50, r.p99
			}
			best[i].rate = max(best[i].rate, r.rate)
		}
	}
	fmt.Fprintf(out, "custody bench --sdk: transport %s (%s), params %v\n", name, filepath.Base(cfg.plugin), cfg.params)
	fmt.Fprintf(out, "method: two agents A and B per way; A WRITEs %d B descriptors into B's region. latency: Post of one transfer, then Poll until DONE (spinning), then Release (not timed), at least %v; p50/p99 of the Post-to-DONE times. rate: %d transfers kept in flight; completions taken from Events (EventSource) or Poll, waiting on Wake when the transport is a Waker and spinning otherwise; each batch released and posted again (one call each), at least %v. %d rounds interleave the ways; each figure is the best of its rounds.\n",
		sdkBenchSize, cfg.minTime, sdkBenchDepth, cfg.minTime, max(1, cfg.repeat))
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "way\tpost->done p50 µs\tp99 µs\tcompletions/s\t")
	for i, w := range ways {
		r := best[i]
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.0f\t\n", w.name, sdkMicros(r.p50), sdkMicros(r.p99), r.rate)
	}
	_ = tw.Flush()
	in, rings, grpc := best[0], best[1], best[2]
	fmt.Fprintf(out, "ratio name=grpc-post-done-p50-ratio value=%.2f\n", float64(grpc.p50)/float64(in.p50))
	fmt.Fprintf(out, "ratio name=grpc-completions-ratio value=%.3f\n", grpc.rate/in.rate)
	sdkGoal(out, "sdk-post-done-p50-ratio", float64(rings.p50)/float64(in.p50), sdkGoalPostDone, false)
	sdkGoal(out, "sdk-completions-ratio", rings.rate/in.rate, sdkGoalCompletions, true)
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

// sdkAgent is one agent of a way and what it holds.
type sdkAgent struct {
	t      sdk.Transport
	end    func()
	path   string
	region sdk.RegionID
	peer   sdk.PeerID
}

// measureSDK starts two agents the way w says, measures, and ends them.
func measureSDK(ctx context.Context, w sdkWay, cfg sdkBenchConfig) (res sdkResult, err error) {
	var ag [2]*sdkAgent
	defer func() {
		for _, a := range ag {
			if a != nil {
				err = errors.Join(err, a.stop())
			}
		}
	}()
	for i, name := range []string{"sdk-bench-a", "sdk-bench-b"} {
		a, err := startSDKAgent(ctx, w, name, cfg.params)
		if a != nil {
			ag[i] = a
		}
		if err != nil {
			return res, err
		}
	}
	a, b := ag[0], ag[1]
	md, err := b.t.LocalMetadata(ctx)
	if err != nil {
		return res, fmt.Errorf("LocalMetadata: %w", err)
	}
	pr, err := one(a.t.LoadPeers(ctx, []sdk.PeerSpec{{Name: "sdk-bench-b", Metadata: md}}))
	if err = firstErr(err, pr.Err); err != nil {
		return res, fmt.Errorf("LoadPeers: %w", err)
	}
	a.peer = pr.ID
	var ld, rd []sdk.Descriptor
	for i := range sdkBenchDepth {
		off := uint64(i * sdkBenchSize)
		ld = append(ld, sdk.Descriptor{Region: a.region, Offset: off, Length: sdkBenchSize})
		rd = append(rd, sdk.Descriptor{Region: b.region, Offset: off, Length: sdkBenchSize})
	}
	lists, err := a.t.PrepareDescriptors(ctx, []sdk.DlistSpec{{Descriptors: ld}, {Peer: a.peer, Descriptors: rd}})
	if err == nil {
		err = errors.Join(lists[0].Err, lists[1].Err)
	}
	if err != nil {
		return res, fmt.Errorf("PrepareDescriptors: %w", err)
	}
	defer func() {
		_, rerr := a.t.ReleaseDescriptors(ctx, []sdk.DlistID{lists[0].ID, lists[1].ID})
		err = errors.Join(err, rerr)
	}()
	specs := make([]sdk.PostSpec, sdkBenchDepth)
	idx := make([]uint32, sdkBenchDepth)
	for i := range specs {
		idx[i] = uint32(i)
		specs[i] = sdk.PostSpec{Op: sdk.OpWrite, Local: lists[0].ID, LocalIndices: idx[i : i+1], Remote: lists[1].ID, RemoteIndices: idx[i : i+1]}
	}
	if res.p50, res.p99, err = sdkLatency(ctx, a.t, specs, cfg.minTime); err != nil {
		return res, err
	}
	res.rate, err = sdkRate(ctx, a.t, specs, cfg.minTime)
	return res, err
}

func startSDKAgent(ctx context.Context, w sdkWay, name string, params map[string]string) (*sdkAgent, error) {
	t, end, err := w.start(ctx)
	if err != nil {
		return nil, err
	}
	a := &sdkAgent{t: t, end: end}
	p := map[string]string{}
	for k, v := range params {
		p[k] = v
	}
	if err := t.Open(ctx, sdk.OpenRequest{Agent: name, Params: p}); err != nil {
		return a, fmt.Errorf("Open %s: %w", name, err)
	}
	f, err := os.CreateTemp(shmDir(), "custody-bench-sdk-")
	if err != nil {
		return a, err
	}
	a.path = f.Name()
	if err := errors.Join(f.Truncate(sdkBenchDepth*sdkBenchSize), f.Close()); err != nil {
		return a, err
	}
	reg, err := one(t.RegisterMemory(ctx, []sdk.Region{{Path: a.path, Length: sdkBenchDepth * sdkBenchSize, Kind: sdk.MemoryHost}}))
	if err = firstErr(err, reg.Err); err != nil {
		return a, fmt.Errorf("RegisterMemory %s: %w", name, err)
	}
	a.region = reg.ID
	return a, nil
}

// stop releases what the agent holds, closes and ends it.
func (a *sdkAgent) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	if a.peer != 0 {
		e, err := one(a.t.UnloadPeers(ctx, []sdk.PeerID{a.peer}))
		errs = append(errs, firstErr(err, e))
	}
	if a.region != 0 {
		e, err := one(a.t.DeregisterMemory(ctx, []sdk.RegionID{a.region}))
		errs = append(errs, firstErr(err, e))
	}
	errs = append(errs, a.t.Close(ctx))
	a.end()
	if a.path != "" {
		errs = append(errs, os.Remove(a.path))
	}
	return errors.Join(errs...)
}

// sdkLatency posts one transfer at a time and spins on Poll until it is
// DONE; it returns the median and 99th percentile of Post to DONE.
func sdkLatency(ctx context.Context, t sdk.Transport, specs []sdk.PostSpec, minTime time.Duration) (p50, p99 time.Duration, err error) {
	var lat []time.Duration
	start := time.Now()
	for i := 0; len(lat) < 1000 || time.Since(start) < minTime; i++ {
		t0 := time.Now()
		pr, err := one(t.Post(ctx, specs[i%len(specs):i%len(specs)+1]))
		if err = firstErr(err, pr.Err); err != nil {
			return 0, 0, fmt.Errorf("Post: %w", err)
		}
		ids := []sdk.HandleID{pr.ID}
		for {
			st, err := one(t.Poll(ctx, ids))
			if err = firstErr(err, st.Err); err != nil {
				return 0, 0, fmt.Errorf("Poll: %w", err)
			}
			if st.State == sdk.StateDone {
				break
			}
			if st.State.Terminal() {
				return 0, 0, fmt.Errorf("handle %d ended %v: %v", pr.ID, st.State, st.Reason)
			}
			runtime.Gosched()
		}
		d := time.Since(t0)
		if i >= 100 { // the first ones warm up
			lat = append(lat, d)
		}
		e, err := one(t.Release(ctx, ids))
		if err = firstErr(err, e); err != nil {
			return 0, 0, fmt.Errorf("Release: %w", err)
		}
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100], nil
}

// sdkRate keeps len(specs) transfers in flight and counts completions per
// second.
func sdkRate(ctx context.Context, t sdk.Transport, specs []sdk.PostSpec, minTime time.Duration) (float64, error) {
	es, hasEvents := t.(sdk.EventSource)
	if p, ok := t.(*plugin.Plugin); ok {
		hasEvents = p.HasEvents()
	}
	waker, _ := t.(sdk.Waker)
	if hasEvents {
		// Events of the latency run are stale here.
		if _, err := es.Events(ctx, 0); err != nil {
			return 0, fmt.Errorf("Events: %w", err)
		}
	}
	slotOf := map[sdk.HandleID]int{}
	post := func(slots []int) error {
		batch := make([]sdk.PostSpec, len(slots))
		for i, s := range slots {
			batch[i] = specs[s]
		}
		res, err := t.Post(ctx, batch)
		if err != nil {
			return fmt.Errorf("Post: %w", err)
		}
		for i, r := range res {
			if r.Err != nil {
				return fmt.Errorf("Post: %w", r.Err)
			}
			slotOf[r.ID] = slots[i]
		}
		return nil
	}
	all := make([]int, len(specs))
	for i := range all {
		all[i] = i
	}
	if err := post(all); err != nil {
		return 0, err
	}
	done := 0
	var start time.Time
	for {
		var finished []sdk.HandleID
		if hasEvents {
			evs, err := es.Events(ctx, 0)
			if err != nil {
				return 0, fmt.Errorf("Events: %w", err)
			}
			for _, e := range evs {
				if _, ours := slotOf[e.Handle]; !ours {
					continue
				}
				if e.State == sdk.StateDone {
					finished = append(finished, e.Handle)
				} else if e.State.Terminal() {
					return 0, fmt.Errorf("handle %d ended %v: %v", e.Handle, e.State, e.Reason)
				}
			}
		} else {
			ids := make([]sdk.HandleID, 0, len(slotOf))
			for id := range slotOf {
				ids = append(ids, id)
			}
			sts, err := t.Poll(ctx, ids)
			if err != nil {
				return 0, fmt.Errorf("Poll: %w", err)
			}
			for i, st := range sts {
				if st.Err == nil && st.State == sdk.StateDone {
					finished = append(finished, ids[i])
				}
			}
		}
		if len(finished) == 0 {
			if waker != nil {
				select {
				case <-waker.Wake():
				case <-time.After(time.Millisecond):
				}
			} else {
				runtime.Gosched()
			}
			continue
		}
		errs, err := t.Release(ctx, finished)
		if err == nil {
			err = errors.Join(errs...)
		}
		if err != nil {
			return 0, fmt.Errorf("Release: %w", err)
		}
		slots := make([]int, len(finished))
		for i, id := range finished {
			slots[i] = slotOf[id]
			delete(slotOf, id)
		}
		if start.IsZero() {
			// The first completions end the warm-up.
			start = time.Now()
		} else {
			done += len(finished)
		}
		if !start.IsZero() && time.Since(start) >= minTime {
			rate := float64(done) / time.Since(start).Seconds()
			return rate, sdkDrain(ctx, t, slotOf)
		}
		if err := post(slots); err != nil {
			return 0, err
		}
	}
}

// sdkDrain waits for what is still in flight and releases it.
func sdkDrain(ctx context.Context, t sdk.Transport, slotOf map[sdk.HandleID]int) error {
	ids := make([]sdk.HandleID, 0, len(slotOf))
	for id := range slotOf {
		ids = append(ids, id)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(ids) > 0 {
		sts, err := t.Poll(ctx, ids)
		if err != nil {
			return err
		}
		var left, rel []sdk.HandleID
		for i, st := range sts {
			if st.Err == nil && st.State.Terminal() {
				rel = append(rel, ids[i])
			} else {
				left = append(left, ids[i])
			}
		}
		if len(rel) > 0 {
			if _, err := t.Release(ctx, rel); err != nil {
				return err
			}
		}
		ids = left
		if time.Now().After(deadline) {
			return fmt.Errorf("%d transfers still in flight after 30 s", len(ids))
		}
		runtime.Gosched()
	}
	return nil
}
