package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/custody-dev/custody/internal/drive"
	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
	"github.com/custody-dev/custody/sdk/plugin/agent"
)

// nixlBenchLatencySize is the transfer whose Post to DONE time is compared.
const nixlBenchLatencySize = 4 << 10

// nixlGoalRatio is the bandwidth custody over NIXL should keep of NIXL
// direct at nixlGoalSize.
const (
	nixlGoalRatio = 0.95
	nixlGoalSize  = 1 << 20
)

// NIXLConfig is what `custody bench nixl` measures: BWConfig's sizes, time
// and rounds (Perftest unused), and the other programs it runs.
type NIXLConfig struct {
	BWConfig
	// Reference is custody-nixl-reference (default: next to the plugin).
	Reference string
	// UCX is custody-transport-ucx, measured beside ("" skips it).
	UCX string
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

// NIXL measures custody over NIXL against NIXL driven directly
// (custody-nixl-reference, a program of plugins/nixl: two agents in two
// processes, no contract, no process boundary), and custody over UCX beside
// them, in one run: bandwidth at each size as BW measures it, then the
// Post to DONE latency of one 4 KiB WRITE at a time.
func NIXL(ctx context.Context, out io.Writer, cfg NIXLConfig) error {
	if cfg.Reference == "" {
		cfg.Reference = filepath.Join(filepath.Dir(cfg.Plugin), "custody-nixl-reference")
	}
	tls := cfg.Params["tls"]
	if tls == "" {
		tls = os.Getenv("UCX_TLS")
	}
	if tls == "" {
		tls = "tcp"
	}
	if err := os.Setenv("UCX_TLS", tls); err != nil {
		return err
	}
	if _, err := os.Stat(cfg.Reference); err != nil {
		return fmt.Errorf("NIXL-direct reference %s: %w; make build builds it next to the plugin", cfg.Reference, err)
	}
	ucxParams := map[string]string{"tls": tls}
	// A pair of agents lives only while it is measured: NIXL's progress
	// threads spin by default, and agents left running would take the CPU
	// from the others' measurements.
	measure := func(path string, params map[string]string, prefix string, size int) (res map[sdk.Op]nixlRow, err error) {
		p, err := startPair(ctx, path, params, prefix)
		if err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, p.Stop()) }()
		res = map[sdk.Op]nixlRow{}
		for _, op := range []sdk.Op{sdk.OpWrite, sdk.OpRead} {
			depth, mibps, err := measure(ctx, p, op, size, cfg.MinTime)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", prefix, err)
			}
			res[op] = nixlRow{depth: depth, ours: mibps}
		}
		return res, nil
	}
	var rows []nixlRow
	for _, size := range cfg.Sizes {
		row := map[sdk.Op]*nixlRow{sdk.OpWrite: {size: size, op: sdk.OpWrite}, sdk.OpRead: {size: size, op: sdk.OpRead}}
		// Rounds interleave custody over NIXL, NIXL direct and custody
		// over UCX; each keeps its best.
		for range max(1, cfg.Repeat) {
			nr, err := measure(cfg.Plugin, cfg.Params, "bench-nixl", size)
			if err != nil {
				return err
			}
			for op, r := range nr {
				row[op].depth, row[op].ours = r.depth, max(row[op].ours, r.ours)
				d, err := nixlReference(ctx, cfg.Reference, cfg.Params, "bw", size, op, r.depth, cfg.MinTime)
				if err != nil {
					return err
				}
				row[op].direct = max(row[op].direct, d["mibps"])
			}
			if cfg.UCX != "" {
				ur, err := measure(cfg.UCX, ucxParams, "bench-ucx", size)
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
	}{{"custody-nixl", cfg.Plugin, cfg.Params}, {"custody-ucx", cfg.UCX, ucxParams}}
	for range max(1, cfg.Repeat) {
		for _, w := range ways {
			if w.path == "" {
				continue
			}
			r, err := drive.MeasureSDKLatency(ctx, agent.Launch(w.path, plugin.LaunchOptions{ReleaseTerminal: true}), w.params, cfg.MinTime)
			if err != nil {
				return fmt.Errorf("latency %s: %w", w.name, err)
			}
			if b, ok := lat[w.name]; !ok || r.P50 < b.P50 {
				lat[w.name] = r
			}
		}
		d, err := nixlReference(ctx, cfg.Reference, cfg.Params, "lat", nixlBenchLatencySize, sdk.OpWrite, 1, cfg.MinTime)
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
