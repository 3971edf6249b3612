package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/custody-dev/custody/internal/drive"
	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
	"github.com/custody-dev/custody/sdk/plugin/agent"
)

func init() {
	var (
		pluginPath string
		params     []string
		sizes      []int
		perftest   string
		minTime    time.Duration
		repeat     int
		e2e        e2eConfig
		e2eOn      bool
		sdkMode    bool
		idle       time.Duration
		ranks      int
		nixlRef    string
		reference  string
		nixlUCX    string
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "measure WRITE and READ bandwidth between two transport processes, against ucx_perftest",
		Long: `bench launches two agents of the transport, each its own process, and
measures WRITE and READ bandwidth between them at each size. In the same run
it measures ucx_perftest -t ucp_put_bw with the same UCX_TLS (the tls
parameter) and size, prints a table, and for each size and op a line
  ratio size=<bytes> op=<write|read> value=<ours/perftest>
For the NIXL transport the reference is NIXL driven directly
(custody-nixl-reference), custody over UCX is measured beside it, and the
4 KiB Post to DONE latency of each is printed too (bench_nixl.go).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := parseParams(params)
			if err != nil {
				return err
			}
			if ranks != 1 && !e2eOn {
				return fmt.Errorf("--ranks %d: only --e2e measures ranks", ranks)
			}
			if e2eOn && sdkMode {
				return fmt.Errorf("--e2e and --sdk measure different things; pass one of them")
			}
			if e2eOn {
				e2e.params, e2e.reference = p, reference
				if err := e2e.check(); err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Minute)
				defer cancel()
				switch ranks {
				case 1:
					return runE2E(ctx, cmd.OutOrStdout(), e2e)
				case 2:
					return runE2ERanks(ctx, cmd.OutOrStdout(), e2e)
				}
				return fmt.Errorf("--ranks %d: want 1 or 2", ranks)
			}
			for _, s := range sizes {
				if s <= 0 || s > benchRegionBytes {
					return fmt.Errorf("--sizes: %d must be in (0, %d]", s, benchRegionBytes)
				}
			}
			if minTime <= 0 {
				return fmt.Errorf("--min-time %v must be positive", minTime)
			}
			if repeat < 1 {
				return fmt.Errorf("--repeat %d must be at least 1", repeat)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Minute)
			defer cancel()
			if sdkMode {
				return runSDKBench(ctx, cmd.OutOrStdout(), sdkBenchConfig{plugin: pluginPath, reference: reference, params: p, minTime: minTime, repeat: repeat, idle: idle})
			}
			bc := benchConfig{plugin: pluginPath, params: p, sizes: sizes, perftest: perftest, minTime: minTime, repeat: repeat}
			if isNIXL(ctx, pluginPath) {
				if nixlRef == "" {
					nixlRef = filepath.Join(filepath.Dir(pluginPath), "custody-nixl-reference")
				}
				return runNIXLBench(ctx, cmd.OutOrStdout(), nixlBenchConfig{benchConfig: bc, reference: nixlRef, ucx: nixlUCX})
			}
			return runBench(ctx, cmd.OutOrStdout(), bc)
		},
	}
	cmd.Flags().StringVar(&pluginPath, "plugin", defaultPlugin("ucx"), "transport plugin binary")
	cmd.Flags().StringArrayVar(&params, "param", nil, "transport parameter k=v (repeatable), e.g. tls=tcp")
	cmd.Flags().IntSliceVar(&sizes, "sizes", []int{4 << 10, 64 << 10, 1 << 20, 16 << 20}, "transfer sizes in bytes")
	cmd.Flags().StringVar(&perftest, "perftest", "ucx_perftest", "ucx_perftest binary; empty skips the comparison")
	cmd.Flags().DurationVar(&minTime, "min-time", time.Second, "least time measured per size and op")
	cmd.Flags().IntVar(&repeat, "repeat", 3, "rounds per size, ours and the references interleaved; the best of each is reported")
	cmd.Flags().BoolVar(&e2eOn, "e2e", false, "measure pulls through two custody hosts on the engine API instead, against an in-process transport and a bare gRPC round trip")
	cmd.Flags().StringVar(&e2e.transport, "transport", "fake", "--e2e: the hosts' transport, fake or ucx")
	cmd.Flags().StringVar(&e2e.custody, "custody", "", "--e2e: the custody binary the hosts run (default: this one)")
	cmd.Flags().StringVar(&reference, "in-process", sibling(drive.ReferenceProgram), "with --sdk and --e2e: the program that measures the transport in process (make build builds it next to custody)")
	cmd.Flags().IntVar(&e2e.pulls, "pulls", 200, "--e2e: sequential pulls measured")
	cmd.Flags().IntVar(&e2e.concurrency, "concurrency", 64, "--e2e: pulls in flight for the throughput run")
	cmd.Flags().DurationVar(&e2e.duration, "duration", 3*time.Second, "--e2e: length of the throughput run")
	cmd.Flags().IntVar(&e2e.blockSize, "block-size", 16<<10, "--e2e: bytes per block")
	cmd.Flags().DurationVar(&e2e.poll, "poll", 0, "--e2e: poll GetFinished at this interval instead of watching the stream (the old way, for comparison)")
	cmd.Flags().IntVar(&ranks, "ranks", 1, "--e2e: 2 measures engines of two ranks each, coordinated through a rank group (embedded etcd) against independent hosts (bench_ranks.go)")
	cmd.Flags().DurationVar(&idle, "idle", 0, "with --sdk: also measure, over this long, the CPU an idle transport process and this host use with the rings attached and nothing in flight")
	cmd.Flags().StringVar(&nixlRef, "nixl-reference", "", "with the NIXL transport: the NIXL-direct reference program (default: custody-nixl-reference next to the plugin)")
	cmd.Flags().StringVar(&nixlUCX, "nixl-ucx", defaultPlugin("ucx"), "with the NIXL transport: the UCX transport measured beside it (empty skips it)")
	cmd.Flags().BoolVar(&sdkMode, "sdk", false, "measure the process boundary instead (bench_sdk.go): Post to DONE latency and completions per second of the transport in one process (custody-bench-ref), through the rings, and over gRPC")
	rootCmd.AddCommand(cmd)
}

// benchRegionBytes is each agent's region; posts in flight at one size
// use distinct slots of it.
const benchRegionBytes = 64 << 20

// benchMaxDepth bounds the posts in flight per batch; a batch is at
// most benchRegionBytes.
const benchMaxDepth = 1024

// pollPause is the pause between two Poll rounds of a batch.
const pollPause = 50 * time.Microsecond

type benchConfig struct {
	plugin   string
	params   map[string]string
	sizes    []int
	perftest string
	minTime  time.Duration
	repeat   int // rounds per size (at least 1), best kept
}

// benchResult is one measured row, in MiB/s.
type benchResult struct {
	size     int
	op       sdk.Op
	depth    int
	ours     float64
	perftest float64 // 0 when not measured
	heap     float64 // perftest with buffers from mmap/heap, 0 when not measured
	note     string
}

func runBench(ctx context.Context, out io.Writer, cfg benchConfig) (err error) {
	if tls := cfg.params["tls"]; tls != "" {
		// The plugin's Describe (before Open) and ucx_perftest both read it.
		if err := os.Setenv("UCX_TLS", tls); err != nil {
			return err
		}
	}
	a, b := &benchSide{name: "bench-a"}, &benchSide{name: "bench-b"}
	defer func() { err = errors.Join(err, a.stop(), b.stop()) }()
	for _, s := range []*benchSide{a, b} {
		if err := s.start(ctx, cfg.plugin, cfg.params); err != nil {
			return err
		}
	}
	md, err := b.pl.LocalMetadata(ctx)
	if err != nil {
		return fmt.Errorf("LocalMetadata of %s: %w", b.name, err)
	}
	pr, err := agent.One(a.pl.LoadPeers(ctx, []sdk.PeerSpec{{Name: b.name, Metadata: md}}))
	if err = agent.FirstErr(err, pr.Err); err != nil {
		return fmt.Errorf("%s LoadPeers(%s): %w", a.name, b.name, err)
	}
	a.peer = pr.ID

	var rows []benchResult
	ops := []sdk.Op{sdk.OpWrite, sdk.OpRead}
	for _, size := range cfg.sizes {
		// Rounds interleave ours and the references, and each keeps its
		// best: on a shared machine a busy neighbour only lowers a figure,
		// and interleaving gives each the same chances of a quiet moment.
		best := make([]benchResult, len(ops))
		var bw, heap float64
		note := ""
		for range max(1, cfg.repeat) {
			for i, op := range ops {
				r, err := a.measure(ctx, b, op, size, cfg.minTime)
				if err != nil {
					return err
				}
				if r.ours > best[i].ours {
					best[i] = r
				}
			}
			if cfg.perftest != "" {
				p, err := runPerftest(ctx, cfg.perftest, size, nil)
				h, herr := runPerftest(ctx, cfg.perftest, size, []string{"UCX_ALLOC_PRIO=mmap,heap"})
				if err = errors.Join(err, herr); err != nil {
					note = "perftest: " + err.Error()
				}
				bw, heap = max(bw, p), max(heap, h)
			}
		}
		for _, r := range best {
			r.perftest, r.heap, r.note = bw, heap, note
			rows = append(rows, r)
		}
	}
	printBench(out, cfg, rows)
	return a.teardown(ctx)
}

// benchSide is one agent of the bench: its process and its region.
type benchSide struct {
	name   string
	pl     *plugin.Plugin
	path   string
	region sdk.RegionID
	peer   sdk.PeerID
}

func (s *benchSide) start(ctx context.Context, path string, params map[string]string) error {
	pl, err := plugin.Launch(ctx, path, plugin.LaunchOptions{})
	if err != nil {
		return err
	}
	s.pl = pl
	if err := pl.Open(ctx, sdk.OpenRequest{Agent: s.name, Params: params}); err != nil {
		return fmt.Errorf("Open %s: %w", s.name, err)
	}
	f, err := os.CreateTemp(agent.Dir(), "custody-bench-")
	if err != nil {
		return err
	}
	s.path = f.Name()
	err = errors.Join(f.Truncate(benchRegionBytes), f.Close())
	if err != nil {
		return err
	}
	reg, err := agent.One(pl.RegisterMemory(ctx, []sdk.Region{{Path: s.path, Length: benchRegionBytes, Kind: sdk.MemoryHost}}))
	if err = agent.FirstErr(err, reg.Err); err != nil {
		return fmt.Errorf("RegisterMemory %s: %w", s.name, err)
	}
	s.region = reg.ID
	return nil
}

// measure runs batches of depth posts of one size-byte descriptor each
// (one Post call), polls the batch until every handle is terminal and
// releases it, until minTime has passed. gRPC costs three calls and a few
// polls per batch, not per transfer.
func (s *benchSide) measure(ctx context.Context, b *benchSide, op sdk.Op, size int, minTime time.Duration) (benchResult, error) {
	depth := min(benchMaxDepth, benchRegionBytes/size)
	var ld, rd []sdk.Descriptor
	idx := make([]uint32, depth)
	for i := range depth {
		ld = append(ld, sdk.Descriptor{Region: s.region, Offset: uint64(i * size), Length: uint64(size)})
		rd = append(rd, sdk.Descriptor{Region: b.region, Offset: uint64(i * size), Length: uint64(size)})
		idx[i] = uint32(i)
	}
	res, err := s.pl.PrepareDescriptors(ctx, []sdk.DlistSpec{{Descriptors: ld}, {Peer: s.peer, Descriptors: rd}})
	if err != nil {
		return benchResult{}, err
	}
	for _, r := range res {
		if r.Err != nil {
			return benchResult{}, r.Err
		}
	}
	defer s.pl.ReleaseDescriptors(ctx, []sdk.DlistID{res[0].ID, res[1].ID})
	specs := make([]sdk.PostSpec, depth)
	for i := range specs {
		specs[i] = sdk.PostSpec{Op: op, Local: res[0].ID, LocalIndices: idx[i : i+1], Remote: res[1].ID, RemoteIndices: idx[i : i+1]}
	}
	// Two groups of depth/2 slots alternate, so that one group's transfers
	// run while the other's are polled, released and posted again.
	half := max(1, depth/2)
	groups := [][]sdk.PostSpec{specs[:half], specs[half:]}
	if len(groups[1]) == 0 {
		groups = groups[:1]
	}
	post := func(g []sdk.PostSpec) ([]sdk.HandleID, error) {
		posted, err := s.pl.Post(ctx, g)
		if err != nil {
			return nil, err
		}
		ids := make([]sdk.HandleID, 0, len(posted))
		for _, p := range posted {
			if p.Err != nil {
				return nil, p.Err
			}
			ids = append(ids, p.ID)
		}
		return ids, nil
	}
	// wait polls ids until all are DONE, pausing between rounds (so that
	// polling leaves the CPU to the transfers) by a pause that grows from
	// pollPause to a 32nd of the group's last time, then releases them.
	var last time.Duration
	wait := func(ids []sdk.HandleID, posted time.Time) error {
		pending := append([]sdk.HandleID(nil), ids...)
		pause := pollPause
		for len(pending) > 0 {
			sts, err := s.pl.Poll(ctx, pending)
			if err != nil {
				return err
			}
			next := pending[:0]
			for i, st := range sts {
				switch {
				case st.Err != nil:
					return st.Err
				case st.State == sdk.StateDone:
				case st.State.Terminal():
					return fmt.Errorf("handle %d ended %v: %v", pending[i], st.State, st.Reason)
				default:
					next = append(next, pending[i])
				}
			}
			pending = next
			if len(pending) > 0 {
				time.Sleep(pause)
				pause = min(2*pause, max(pollPause, last/32))
			}
		}
		last = time.Since(posted)
		errs, err := s.pl.Release(ctx, ids)
		if err != nil {
			return err
		}
		return errors.Join(errs...)
	}
	run := func(rounds int, minTime time.Duration) (int, time.Duration, error) {
		inflight := make([][]sdk.HandleID, len(groups))
		postedAt := make([]time.Time, len(groups))
		for g := range groups {
			var err error
			if inflight[g], err = post(groups[g]); err != nil {
				return 0, 0, err
			}
			postedAt[g] = time.Now()
		}
		start := time.Now()
		done := 0
		for g := 0; ; g = (g + 1) % len(groups) {
			if err := wait(inflight[g], postedAt[g]); err != nil {
				return 0, 0, err
			}
			done += len(groups[g])
			if done >= rounds*depth && time.Since(start) >= minTime {
				// drain the other groups
				for k := 1; k < len(groups); k++ {
					o := (g + k) % len(groups)
					if err := wait(inflight[o], postedAt[o]); err != nil {
						return 0, 0, err
					}
					done += len(groups[o])
				}
				return done, time.Since(start), nil
			}
			var err error
			if inflight[g], err = post(groups[g]); err != nil {
				return 0, 0, err
			}
			postedAt[g] = time.Now()
		}
	}
	if _, _, err := run(1, 0); err != nil { // warm up: connect, fault pages in
		return benchResult{}, fmt.Errorf("%v %d B: %w", op, size, err)
	}
	n, el, err := run(4, minTime)
	if err != nil {
		return benchResult{}, fmt.Errorf("%v %d B: %w", op, size, err)
	}
	return benchResult{size: size, op: op, depth: depth, ours: float64(n*size) / el.Seconds() / (1 << 20)}, nil
}

func (s *benchSide) teardown(ctx context.Context) error {
	var errs []error
	if s.peer != 0 {
		e, err := agent.One(s.pl.UnloadPeers(ctx, []sdk.PeerID{s.peer}))
		errs = append(errs, agent.FirstErr(err, e))
	}
	return errors.Join(errs...)
}

// stop deregisters, closes and ends the agent and removes its region file.
func (s *benchSide) stop() error {
	if s.pl == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	if s.region != 0 {
		e, err := agent.One(s.pl.DeregisterMemory(ctx, []sdk.RegionID{s.region}))
		errs = append(errs, agent.FirstErr(err, e))
	}
	errs = append(errs, s.pl.Close(ctx))
	s.pl.Stop()
	if s.path != "" {
		errs = append(errs, os.Remove(s.path))
	}
	s.pl = nil
	return errors.Join(errs...)
}

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

func printBench(out io.Writer, cfg benchConfig, rows []benchResult) {
	fmt.Fprintf(out, "custody bench: %s, params %v, UCX_TLS=%q\n", filepath.Base(cfg.plugin), cfg.params, os.Getenv("UCX_TLS"))
	fmt.Fprintf(out, "method: two agents in two processes; per size and op, DEPTH posts of one descriptor each kept in flight in two groups of DEPTH/2 (one Post call per group); while one group runs the other is polled (one Poll call per round, rounds 50 µs apart growing to 1/32 of the group's time) until all DONE, released (one call) and posted again; the time runs from the first post to the last DONE, at least %v, after one warm-up round; gRPC is paid per group, not per transfer. perftest: ucx_perftest -t ucp_put_bw, same UCX_TLS and size, overall bandwidth. Per size, %d rounds interleave ours and the references; each figure is the best of its rounds. MiB/s.\n", cfg.minTime, max(1, cfg.repeat))
	fmt.Fprint(out, perftestPaths)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "size\top\tdepth\tours MiB/s\tperftest MiB/s\tratio\tperftest-heap MiB/s\tratio-heap\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%.0f\t%.0f\t%s\t%.0f\t%s\t\n", r.size, strings.ToLower(r.op.String()), r.depth, r.ours, r.perftest, ratio(r.ours, r.perftest), r.heap, ratio(r.ours, r.heap))
	}
	_ = tw.Flush()
	for _, r := range rows {
		if r.note != "" && r.op == sdk.OpWrite {
			fmt.Fprintf(out, "note size=%d: %s\n", r.size, r.note)
		}
	}
	for _, r := range rows {
		if r.perftest > 0 {
			fmt.Fprintf(out, "ratio size=%d op=%s value=%.3f\n", r.size, strings.ToLower(r.op.String()), r.ours/r.perftest)
		}
	}
	for _, r := range rows {
		if r.heap > 0 {
			fmt.Fprintf(out, "ratio-heap size=%d op=%s value=%.3f\n", r.size, strings.ToLower(r.op.String()), r.ours/r.heap)
		}
	}
}

// perftestPaths says which UCX path each reference takes, as UCX 1.13
// reports it (UCX_LOG_LEVEL=info: the ep_cfg line; UCX_PROTO_ENABLE=y
// UCX_PROTO_INFO=y: the protocol table) and strace confirms (no
// process_vm_writev: cma moves none of these bytes).
const perftestPaths = `paths (UCX 1.13):
  perftest: its buffers are allocated by UCX. Over posix/sysv, UCX allocates them as shared segments that the
    peer maps (ep_cfg: rma(sysv/memory posix/memory)): a put is one memcpy by the sender into the peer's memory,
    without the peer. Over tcp, puts are emulated over active messages (ep_cfg: rma_am(tcp/...)) whatever the memory,
    the same path as ours.
  ours: region files registered by ucp_mem_map; posix and sysv cannot register memory, only cma can, and UCP 1.13
    has no put/get lane over cma (zero-copy only; it serves active-message rendezvous). So over posix,sysv,cma our
    puts and gets are emulated over active messages through the peer's sysv FIFO ("software emulation"): the sender
    copies into the FIFO, the peer's progress copies out and acknowledges. Two copies and both sides' CPU per byte.
  perftest-heap: perftest with UCX_ALLOC_PRIO=mmap,heap: buffers from mmap, registered like ours, so its puts take
    our path (over tcp the same path as perftest). The fair reference for the shared-memory configuration. A
    perftest on cma alone cannot run: ucp_ep_create fails, no active-message transport.
  perftest put_bw counts a put done when its source is free (one flush at the end); ours when the bytes are at
    the destination (a flush per Post).
`

func ratio(ours, ref float64) string {
	if ref <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", ours/ref)
}
