package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// BWConfig is what `custody bench bw` measures.
type BWConfig struct {
	// Plugin is the transport binary; Params its parameters (tls is also
	// UCX_TLS, for it and ucx_perftest alike).
	Plugin string
	Params map[string]string
	// Sizes are the transfer sizes, each in (0, RegionBytes].
	Sizes []int
	// Perftest is the ucx_perftest binary; empty skips the comparison.
	Perftest string
	// Rounds are per size and op.
	Rounds
}

// Rounds are how a transport benchmark measures each figure: for at least
// MinTime, in Repeat rounds (at least 1) that interleave ours and the
// references, the best of each reported.
type Rounds struct {
	MinTime time.Duration
	Repeat  int
}

// Check refuses values out of range, naming the flag.
func (r *Rounds) Check() error {
	if r.MinTime <= 0 {
		return fmt.Errorf("--min-time %v must be positive", r.MinTime)
	}
	if r.Repeat < 1 {
		return fmt.Errorf("--repeat %d must be at least 1", r.Repeat)
	}
	return nil
}

// Check refuses values out of range, naming the flag.
func (c *BWConfig) Check() error {
	for _, s := range c.Sizes {
		if s <= 0 || s > RegionBytes {
			return fmt.Errorf("--sizes: %d must be in (0, %d]", s, RegionBytes)
		}
	}
	return c.Rounds.Check()
}

// bwRow is one measured row, in MiB/s.
type bwRow struct {
	size     int
	op       sdk.Op
	depth    int
	ours     float64
	perftest float64 // 0 when not measured
	heap     float64 // perftest with buffers from mmap/heap, 0 when not measured
	note     string
}

// BW measures WRITE and READ bandwidth between two agents of cfg.Plugin,
// each its own process, at each size, against ucx_perftest -t ucp_put_bw
// with the same UCX_TLS and size, and prints a table and, for each size
// and op, a line
//
//	ratio size=<bytes> op=<write|read> value=<ours/perftest>
func BW(ctx context.Context, out io.Writer, cfg BWConfig) (err error) {
	if tls := cfg.Params["tls"]; tls != "" {
		// The plugin's Describe (before Open) and ucx_perftest both read it.
		if err := os.Setenv("UCX_TLS", tls); err != nil {
			return err
		}
	}
	p, err := startPair(ctx, cfg.Plugin, cfg.Params, "bench")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, p.Stop()) }()
	var rows []bwRow
	ops := []sdk.Op{sdk.OpWrite, sdk.OpRead}
	for _, size := range cfg.Sizes {
		// Rounds interleave ours and the references, and each keeps its
		// best: on a shared machine a busy neighbour only lowers a figure,
		// and interleaving gives each the same chances of a quiet moment.
		best := make([]bwRow, len(ops))
		var bw, heap float64
		note := ""
		for range max(1, cfg.Repeat) {
			for i, op := range ops {
				depth, mibps, err := measure(ctx, p, op, size, cfg.MinTime)
				if err != nil {
					return err
				}
				if mibps > best[i].ours {
					best[i] = bwRow{size: size, op: op, depth: depth, ours: mibps}
				}
			}
			if cfg.Perftest != "" {
				pt, err := runPerftest(ctx, cfg.Perftest, size, nil)
				h, herr := runPerftest(ctx, cfg.Perftest, size, []string{"UCX_ALLOC_PRIO=mmap,heap"})
				if err = errors.Join(err, herr); err != nil {
					note = "perftest: " + err.Error()
				}
				bw, heap = max(bw, pt), max(heap, h)
			}
		}
		for _, r := range best {
			r.perftest, r.heap, r.note = bw, heap, note
			rows = append(rows, r)
		}
	}
	printBW(out, cfg, rows)
	return nil
}
