package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/custody-dev/custody/internal/drive"
	"github.com/custody-dev/custody/sdk"
)

// printNIXLBandwidth prints NIXL's bandwidth table, says how it
// measured, and prints the ratio and goal lines CI reads.
func printNIXLBandwidth(out io.Writer, cfg NIXLConfig, refInfo string, rows []nixlRow) {
	fmt.Fprintf(out, "custody bench: %s against NIXL direct (%s), params %v, UCX_TLS=%q\n", filepath.Base(cfg.Plugin), filepath.Base(cfg.Reference), cfg.Params, os.Getenv("UCX_TLS"))
	if strings.HasSuffix(cfg.Reference, ".py") {
		fmt.Fprintf(out, "nixl-direct: %s on NIXL's wheel (%s) through its Python API, run by %s: the same requests, depths, groups and pauses, one Python call more per NIXL call\n", cfg.Reference, refInfo, cfg.Python)
	}
	fmt.Fprintf(out, "method: per size and op, DEPTH transfers of one descriptor each kept in flight in two groups of DEPTH/2; while one group runs the other is polled (rounds 50 µs apart growing to 1/32 of the group's time) until all DONE, released and posted again; at least %v after one warm-up round. custody-nixl: two custody-transport-nixl processes driven through the plugin boundary (one Post, Poll and Release call per group). nixl-direct: custody-nixl-reference, two NIXL agents in two processes, one makeXferReq+postXferReq per transfer, the same depths, groups and pauses between status rounds (getXferStatus of each pending transfer), releaseXferReq when done. custody's plugin process also polls its running handles itself (the ring pump, 20-200 µs apart). custody-ucx: custody-transport-ucx, same method, tls=%s. Each pair of agents runs only while it is measured (NIXL's progress threads spin by default). %d rounds interleave the three; each figure is the best of its rounds. MiB/s.\n",
		cfg.MinTime, os.Getenv("UCX_TLS"), max(1, cfg.Repeat))
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "size\top\tdepth\tcustody-nixl MiB/s\tnixl-direct MiB/s\tratio\tcustody-ucx MiB/s\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%.0f\t%s\t%s\t\n", r.size, strings.ToLower(r.op.String()), r.depth, mibps(r.ours), r.direct, ratio(r.ours, r.direct), mibps(r.ucx))
	}
	_ = tw.Flush()
	for _, r := range rows {
		if r.direct > 0 && r.ours > 0 {
			fmt.Fprintf(out, "ratio size=%d op=%s value=%.3f\n", r.size, strings.ToLower(r.op.String()), r.ours/r.direct)
		}
		if r.direct > 0 && r.ucx > 0 {
			fmt.Fprintf(out, "ratio way=custody-ucx size=%d op=%s value=%.3f\n", r.size, strings.ToLower(r.op.String()), r.ucx/r.direct)
		}
	}
	for _, r := range rows {
		if r.size != nixlGoalSize || r.direct <= 0 {
			continue
		}
		if r.ours > 0 {
			goal(out, "nixl-bw-ratio-"+strings.ToLower(r.op.String())+"-1MiB", r.ours/r.direct, nixlGoalRatio, true)
		}
		if r.ucx > 0 && r.op == sdk.OpWrite {
			goal(out, "ucx-vs-nixl-bw-ratio-write-1MiB", r.ucx/r.direct, nixlGoalRatio, true)
		}
	}
}

// mibps is a bandwidth for the table, "-" when not measured.
func mibps(v float64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", v)
}

// printNIXLLatency prints the Post to DONE latency of each way and the
// ratio line of custody over NIXL to NIXL direct.
func printNIXLLatency(out io.Writer, cfg NIXLConfig, lat map[string]drive.SDKResult) {
	fmt.Fprintf(out, "latency: one %d B WRITE at a time, Post then Poll (getXferStatus) spinning until DONE, at least %v; custody ways through the plugin boundary (rings, handles released at terminal), as a host drives a transport.\n", nixlBenchLatencySize, cfg.MinTime)
	for _, name := range []string{"nixl-direct", "custody-nixl", "custody-ucx"} {
		if r, ok := lat[name]; ok {
			fmt.Fprintf(out, "latency way=%s size=%d p50_us=%.2f p99_us=%.2f\n", name, nixlBenchLatencySize, micros(r.P50), micros(r.P99))
		}
	}
	if d, c := lat["nixl-direct"], lat["custody-nixl"]; d.P50 > 0 && c.P50 > 0 {
		fmt.Fprintf(out, "ratio name=nixl-post-done-p50 value=%.2f\n", float64(c.P50)/float64(d.P50))
	}
}
