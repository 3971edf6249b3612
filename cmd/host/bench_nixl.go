package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/custody-dev/custody/internal/drive"
	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
	"github.com/custody-dev/custody/sdk/plugin/agent"
)

// `custody bench --plugin custody-transport-nixl`: custody over NIXL
// against NIXL driven directly (custody-nixl-reference, a program of
// plugins/nixl: two agents in two processes, no contract, no process
// boundary), and custody over UCX beside them, in one run.

// nixlBenchLatencySize is the transfer whose Post to DONE time is compared.
const nixlBenchLatencySize = 4 << 10

// nixlGoalRatio is the bandwidth custody over NIXL should keep of NIXL
// direct at nixlGoalSize.
const (
	nixlGoalRatio = 0.95
	nixlGoalSize  = 1 << 20
)

// nixlBenchConfig adds the other programs of the NIXL bench.
type nixlBenchConfig struct {
	benchConfig
	// reference is custody-nixl-reference (default: next to the plugin).
	reference string
	// ucx is custody-transport-ucx, measured beside ("" skips it).
	ucx string
}

// nixlRow is one measured size and op, in MiB/s.
type nixlRow struct {
	size   int
	op     sdk.Op
	depth  int
	ours   float64
	direct float64
	ucx    float64
}

// isNIXL reports whether the plugin at path is the NIXL transport.
func isNIXL(ctx context.Context, path string) bool {
	p, err := plugin.Launch(ctx, path, plugin.LaunchOptions{})
	if err != nil {
		return false
	}
	defer p.Stop()
	return p.Description().Name == "nixl"
}

func runNIXLBench(ctx context.Context, out io.Writer, cfg nixlBenchConfig) error {
	tls := cfg.params["tls"]
	if tls == "" {
		tls = os.Getenv("UCX_TLS")
	}
	if tls == "" {
		tls = "tcp"
	}
	if err := os.Setenv("UCX_TLS", tls); err != nil {
		return err
	}
	if _, err := os.Stat(cfg.reference); err != nil {
		return fmt.Errorf("NIXL-direct reference %s: %w; make build builds it next to the plugin", cfg.reference, err)
	}
	ucxParams := map[string]string{"tls": tls}
	// A pair of agents lives only while it is measured: NIXL's progress
	// threads spin by default, and agents left running would take the CPU
	// from the others' measurements.
	measure := func(path string, params map[string]string, prefix string, size int) (res map[sdk.Op]benchResult, err error) {
		a, b := &benchSide{name: prefix + "-a"}, &benchSide{name: prefix + "-b"}
		defer func() { err = errors.Join(err, a.stop(), b.stop()) }()
		for _, s := range []*benchSide{a, b} {
			if err := s.start(ctx, path, params); err != nil {
				return nil, err
			}
		}
		md, err := b.pl.LocalMetadata(ctx)
		if err != nil {
			return nil, fmt.Errorf("LocalMetadata of %s: %w", b.name, err)
		}
		pr, err := agent.One(a.pl.LoadPeers(ctx, []sdk.PeerSpec{{Name: b.name, Metadata: md}}))
		if err = agent.FirstErr(err, pr.Err); err != nil {
			return nil, fmt.Errorf("%s LoadPeers(%s): %w", a.name, b.name, err)
		}
		a.peer = pr.ID
		res = map[sdk.Op]benchResult{}
		for _, op := range []sdk.Op{sdk.OpWrite, sdk.OpRead} {
			if res[op], err = a.measure(ctx, b, op, size, cfg.minTime); err != nil {
				return nil, fmt.Errorf("%s: %w", prefix, err)
			}
		}
		return res, a.teardown(ctx)
	}
	var rows []nixlRow
	for _, size := range cfg.sizes {
		row := map[sdk.Op]*nixlRow{sdk.OpWrite: {size: size, op: sdk.OpWrite}, sdk.OpRead: {size: size, op: sdk.OpRead}}
		// Rounds interleave custody over NIXL, NIXL direct and custody
		// over UCX; each keeps its best.
		for range max(1, cfg.repeat) {
			nr, err := measure(cfg.plugin, cfg.params, "bench-nixl", size)
			if err != nil {
				return err
			}
			for op, r := range nr {
				row[op].depth, row[op].ours = r.depth, max(row[op].ours, r.ours)
				d, err := nixlReference(ctx, cfg.reference, cfg.params, "bw", size, op, r.depth, cfg.minTime)
				if err != nil {
					return err
				}
				row[op].direct = max(row[op].direct, d["mibps"])
			}
			if cfg.ucx != "" {
				ur, err := measure(cfg.ucx, ucxParams, "bench-ucx", size)
				if err != nil {
					return err
				}
				for op, r := range ur {
					row[op].ucx = max(row[op].ucx, r.ours)
				}
			}
		}
		rows = append(rows, *row[sdk.OpWrite], *row[sdk.OpRead])
	}

	printNIXLBandwidth(out, cfg, rows)

	// Post to DONE of one 4 KiB WRITE at a time, spinning: custody through
	// the rings (the way a host drives a plugin) against NIXL direct.
	lat := map[string]drive.SDKResult{}
	ways := []struct {
		name, path string
		params     map[string]string
	}{{"custody-nixl", cfg.plugin, cfg.params}, {"custody-ucx", cfg.ucx, ucxParams}}
	for range max(1, cfg.repeat) {
		for _, w := range ways {
			if w.path == "" {
				continue
			}
			path := w.path
			r, err := drive.MeasureSDKLatency(ctx, func(ctx context.Context) (sdk.Transport, func(), error) {
				p, err := plugin.Launch(ctx, path, plugin.LaunchOptions{ReleaseTerminal: true})
				if err != nil {
					return nil, nil, err
				}
				return p, p.Stop, nil
			}, w.params, cfg.minTime)
			if err != nil {
				return fmt.Errorf("latency %s: %w", w.name, err)
			}
			if b, ok := lat[w.name]; !ok || r.P50 < b.P50 {
				lat[w.name] = r
			}
		}
		d, err := nixlReference(ctx, cfg.reference, cfg.params, "lat", nixlBenchLatencySize, sdk.OpWrite, 1, cfg.minTime)
		if err != nil {
			return err
		}
		r := drive.SDKResult{P50: time.Duration(d["p50_ns"]), P99: time.Duration(d["p99_ns"])}
		if b, ok := lat["nixl-direct"]; !ok || r.P50 < b.P50 {
			lat["nixl-direct"] = r
		}
	}
	printNIXLLatency(out, cfg, lat)
	return nil
}

// nixlReference runs the NIXL-direct reference once and returns the
// numbers of its result line.
func nixlReference(ctx context.Context, bin string, params map[string]string, mode string, size int, op sdk.Op, depth int, minTime time.Duration) (map[string]float64, error) {
	args := []string{mode, "-size", strconv.Itoa(size), "-op", strings.ToLower(op.String()), "-depth", strconv.Itoa(depth), "-min-time", minTime.String()}
	for k, v := range params {
		args = append(args, "-param", k+"="+v)
	}
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("NIXL-direct reference %s %v: %v: %s", bin, args, err, drive.LastLine(out))
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "reference" {
			continue
		}
		vals := map[string]float64{}
		for _, kv := range f[1:] {
			if k, v, ok := strings.Cut(kv, "="); ok {
				if x, err := strconv.ParseFloat(v, 64); err == nil {
					vals[k] = x
				}
			}
		}
		return vals, nil
	}
	return nil, fmt.Errorf("NIXL-direct reference printed no result line: %s", drive.LastLine(out))
}

func printNIXLBandwidth(out io.Writer, cfg nixlBenchConfig, rows []nixlRow) {
	fmt.Fprintf(out, "custody bench: %s against NIXL direct (%s), params %v, UCX_TLS=%q\n", filepath.Base(cfg.plugin), filepath.Base(cfg.reference), cfg.params, os.Getenv("UCX_TLS"))
	fmt.Fprintf(out, "method: per size and op, DEPTH transfers of one descriptor each kept in flight in two groups of DEPTH/2; while one group runs the other is polled (rounds 50 µs apart growing to 1/32 of the group's time) until all DONE, released and posted again; at least %v after one warm-up round. custody-nixl: two custody-transport-nixl processes driven through the plugin boundary (one Post, Poll and Release call per group). nixl-direct: custody-nixl-reference, two NIXL agents in two processes, one makeXferReq+postXferReq per transfer, the same depths, groups and pauses between status rounds (getXferStatus of each pending transfer), releaseXferReq when done. custody's plugin process also polls its running handles itself (the ring pump, 20-200 µs apart). custody-ucx: custody-transport-ucx, same method, tls=%s. Each pair of agents runs only while it is measured (NIXL's progress threads spin by default). %d rounds interleave the three; each figure is the best of its rounds. MiB/s.\n",
		cfg.minTime, os.Getenv("UCX_TLS"), max(1, cfg.repeat))
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "size\top\tdepth\tcustody-nixl MiB/s\tnixl-direct MiB/s\tratio\tcustody-ucx MiB/s\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%.0f\t%.0f\t%s\t%.0f\t\n", r.size, strings.ToLower(r.op.String()), r.depth, r.ours, r.direct, ratio(r.ours, r.direct), r.ucx)
	}
	_ = tw.Flush()
	for _, r := range rows {
		if r.direct > 0 {
			fmt.Fprintf(out, "ratio size=%d op=%s value=%.3f\n", r.size, strings.ToLower(r.op.String()), r.ours/r.direct)
		}
	}
	for _, r := range rows {
		if r.size == nixlGoalSize && r.direct > 0 {
			sdkGoal(out, "nixl-bw-ratio-"+strings.ToLower(r.op.String())+"-1MiB", r.ours/r.direct, nixlGoalRatio, true)
		}
	}
}

func printNIXLLatency(out io.Writer, cfg nixlBenchConfig, lat map[string]drive.SDKResult) {
	fmt.Fprintf(out, "latency: one %d B WRITE at a time, Post then Poll (getXferStatus) spinning until DONE, at least %v; custody ways through the plugin boundary (rings, handles released at terminal), as a host drives a transport.\n", nixlBenchLatencySize, cfg.minTime)
	for _, name := range []string{"nixl-direct", "custody-nixl", "custody-ucx"} {
		if r, ok := lat[name]; ok {
			fmt.Fprintf(out, "latency way=%s size=%d p50_us=%.2f p99_us=%.2f\n", name, nixlBenchLatencySize, sdkMicros(r.P50), sdkMicros(r.P99))
		}
	}
	if d, c := lat["nixl-direct"], lat["custody-nixl"]; d.P50 > 0 && c.P50 > 0 {
		fmt.Fprintf(out, "ratio name=nixl-post-done-p50 value=%.2f\n", float64(c.P50)/float64(d.P50))
	}
}
