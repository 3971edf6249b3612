package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/custody-dev/custody/sdk"
)

// printBW prints BW's table, its notes and the lines CI reads, and says
// how it measured.
func printBW(out io.Writer, cfg BWConfig, rows []bwRow) {
	fmt.Fprintf(out, "custody bench: %s, params %v, UCX_TLS=%q\n", filepath.Base(cfg.Plugin), cfg.Params, os.Getenv("UCX_TLS"))
	fmt.Fprintf(out, "method: two agents in two processes; per size and op, DEPTH posts of one descriptor each kept in flight in two groups of DEPTH/2 (one Post call per group); while one group runs the other is polled (one Poll call per round, rounds 50 µs apart growing to 1/32 of the group's time) until all DONE, released (one call) and posted again; the time runs from the first post to the last DONE, at least %v, after one warm-up round; gRPC is paid per group, not per transfer. perftest: ucx_perftest -t ucp_put_bw, same UCX_TLS and size, overall bandwidth. Per size, %d rounds interleave ours and the references; each figure is the best of its rounds. MiB/s.\n", cfg.MinTime, max(1, cfg.Repeat))
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
