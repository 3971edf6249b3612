package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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
	// Reference is the NIXL-direct reference: custody-nixl-reference, or a
	// Python script of the same arguments (python/bench/nixl_reference.py,
	// on NIXL's wheel), run with Python. Default: custody-nixl-reference
	// next to the plugin where it was built, else PythonReference.
	Reference string
	// Python runs a Reference that is a Python script.
	Python string
	// PythonReference is the script Reference defaults to where
	// custody-nixl-reference was not built.
	PythonReference string
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
		if _, err := os.Stat(cfg.Reference); err != nil && cfg.PythonReference != "" {
			cfg.Reference = cfg.PythonReference
		}
	}
	// custody over NIXL is measured where its transport was built (make
	// build, where scripts/nixl.sh finds a NIXL); without one the run
	// compares NIXL direct and custody over UCX alone.
	var noPlugin string
	if _, err := os.Stat(cfg.Plugin); err != nil {
		noPlugin = fmt.Sprintf("custody over NIXL not measured: %v (make test-nixl builds it against NIXL from the package registries, docs/nixl.md)", err)
		if cfg.UCX == "" {
			return errors.New(noPlugin + ", and no UCX transport to measure beside NIXL direct")
		}
	}
	ref := nixlRef{bin: cfg.Reference}
	if strings.HasSuffix(cfg.Reference, ".py") {
		ref = nixlRef{bin: cfg.Python, args: []string{cfg.Reference}}
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
	if err := ref.check(); err != nil {
		return err
	}
	var refInfo string
	if ref.args != nil {
		v, err := exec.CommandContext(ctx, ref.bin, append(slices.Clone(ref.args), "version")...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("NIXL-direct reference %s version: %v: %s", ref, err, drive.LastLine(v))
		}
		refInfo = drive.LastLine(v)
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
			if noPlugin == "" {
				nr, err := measure(cfg.Plugin, cfg.Params, "bench-nixl", size)
				if err != nil {
					return err
				}
				for op, r := range nr {
					row[op].depth, row[op].ours = r.depth, max(row[op].ours, r.ours)
				}
			}
			if cfg.UCX != "" {
				ur, err := measure(cfg.UCX, ucxParams, "bench-ucx", size)
				if err != nil {
					return err
				}
				for op, r := range ur {
					row[op].ucx = max(row[op].ucx, r.ours)
					if noPlugin != "" {
						row[op].depth = r.depth
					}
				}
			}
			for _, op := range []sdk.Op{sdk.OpWrite, sdk.OpRead} {
				d, err := ref.run(ctx, cfg.Params, "bw", size, op, row[op].depth, cfg.MinTime)
				if err != nil {
					return err
				}
				row[op].direct = max(row[op].direct, d["mibps"])
			}
		}
		rows = append(rows, *row[sdk.OpWrite], *row[sdk.OpRead])
	}

	if noPlugin != "" {
		fmt.Fprintln(out, noPlugin)
	}
	printNIXLBandwidth(out, cfg, refInfo, rows)

	// Post to DONE of one 4 KiB WRITE at a time, spinning: custody through
	// the rings (the way a host drives a plugin) against NIXL direct.
	lat := map[string]drive.SDKResult{}
	ways := []struct {
		name, path string
		params     map[string]string
	}{{"custody-nixl", cfg.Plugin, cfg.Params}, {"custody-ucx", cfg.UCX, ucxParams}}
	for range max(1, cfg.Repeat) {
		for _, w := range ways {
			if w.path == "" || (w.path == cfg.Plugin && noPlugin != "") {
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
		d, err := ref.run(ctx, cfg.Params, "lat", nixlBenchLatencySize, sdk.OpWrite, 1, cfg.MinTime)
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
