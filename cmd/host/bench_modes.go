package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/custody-dev/custody/internal/bench"
)

func newBenchBW() *cobra.Command {
	var (
		cfg    bench.BWConfig
		params []string
	)
	cmd := &cobra.Command{
		Use:   "bw",
		Short: "WRITE and READ bandwidth between two transport processes, against ucx_perftest",
		Long: `bw launches two agents of the transport, each its own process, and
measures WRITE and READ bandwidth between them at each size. In the same run
it measures ucx_perftest -t ucp_put_bw with the same UCX_TLS (the tls
parameter) and size, prints a table, and for each size and op a line
  ratio size=<bytes> op=<write|read> value=<ours/perftest>`,
		Args: cobra.NoArgs,
		RunE: benchRun(&params, &cfg.Params, cfg.Check, func(ctx context.Context, out io.Writer) error {
			return bench.BW(ctx, out, cfg)
		}),
	}
	f := cmd.Flags()
	addPluginFlags(f, &cfg.Plugin, "ucx", &params)
	f.IntSliceVar(&cfg.Sizes, "sizes", []int{4 << 10, 64 << 10, 1 << 20, 16 << 20}, "transfer sizes in bytes")
	f.StringVar(&cfg.Perftest, "perftest", "ucx_perftest", "ucx_perftest binary; empty skips the comparison")
	addRoundFlags(f, &cfg.Rounds, "size and op")
	return cmd
}

func newBenchNIXL() *cobra.Command {
	var (
		cfg    bench.NIXLConfig
		params []string
	)
	cmd := &cobra.Command{
		Use:   "nixl",
		Short: "custody over NIXL against NIXL driven directly, custody over UCX beside them: bandwidth and 4 KiB Post to DONE latency",
		Long: `nixl measures WRITE and READ bandwidth between two agents of the NIXL
transport as bw does, and beside it NIXL driven directly (custody-nixl-reference:
two NIXL agents in two processes, no contract, no process boundary) and custody
over UCX; then the 4 KiB Post to DONE latency of each. It prints a table, a
ratio line per size and op, and goal lines at 1 MiB.

Where the NIXL transport was not built (make test-nixl builds it),
it measures NIXL direct through the wheel's Python API
(python/bench/nixl_reference.py) against custody over UCX alone.`,
		Args: cobra.NoArgs,
		RunE: benchRun(&params, &cfg.Params, cfg.Check, func(ctx context.Context, out io.Writer) error {
			return bench.NIXL(ctx, out, cfg)
		}),
	}
	f := cmd.Flags()
	addPluginFlags(f, &cfg.Plugin, "nixl", &params)
	f.IntSliceVar(&cfg.Sizes, "sizes", []int{4 << 10, 64 << 10, 1 << 20, 16 << 20}, "transfer sizes in bytes")
	addRoundFlags(f, &cfg.Rounds, "size and op")
	f.StringVar(&cfg.Reference, "nixl-reference", "", "the NIXL-direct reference: a program, or a Python script run by --nixl-python (default: custody-nixl-reference next to the plugin where it was built, else "+repoFile("python/bench/nixl_reference.py")+")")
	f.StringVar(&cfg.Python, "nixl-python", repoFile(".venv/bin/python"), "the Python that runs a --nixl-reference script (make test-python makes .venv, with NIXL's wheel)")
	cfg.PythonReference = repoFile("python/bench/nixl_reference.py")
	f.StringVar(&cfg.UCX, "nixl-ucx", defaultPlugin("ucx"), "the UCX transport measured beside it (empty skips it)")
	return cmd
}

func newBenchSDK() *cobra.Command {
	var (
		cfg    bench.SDKConfig
		params []string
	)
	cmd := &cobra.Command{
		Use:   "sdk",
		Short: "what the process boundary costs: Post to DONE latency and completions per second in process, through the rings, over gRPC",
		Long: `sdk measures the process boundary: the Post to DONE latency and the
completions per second of the transport in one process (custody-bench-ref),
through the shared-memory rings, and over gRPC, and prints goal lines.`,
		Args: cobra.NoArgs,
		RunE: benchRun(&params, &cfg.Params, cfg.Check, func(ctx context.Context, out io.Writer) error {
			return bench.SDK(ctx, out, cfg)
		}),
	}
	f := cmd.Flags()
	addPluginFlags(f, &cfg.Plugin, "ucx", &params)
	addInProcessFlag(f, &cfg.Reference)
	addRoundFlags(f, &cfg.Rounds, "figure")
	f.DurationVar(&cfg.Idle, "idle", 0, "also measure, over this long, the CPU an idle transport process and this host use with the rings attached and nothing in flight")
	return cmd
}

func newBenchE2E() *cobra.Command {
	var (
		cfg    bench.E2EConfig
		params []string
	)
	cmd := &cobra.Command{
		Use:   "e2e",
		Short: "pulls through two custody hosts on the engine API, against the transport in process and a bare gRPC round trip",
		Long: `e2e starts a prefill and a decode host and measures one-block pull latency,
the CPU, system calls and context switches per pull of each process (the
engine side, each host, each transport), and pulls per second with
--concurrency in flight, against the same transport in process and a bare
gRPC round trip (its two processes counted the same way), and prints goal
lines e2e-pull-p50, e2e-pull-cpu and e2e-pull-syscalls. System calls are
counted with perf events, which needs root (or CAP_PERFMON).`,
		Args: cobra.NoArgs,
		RunE: benchRun(&params, &cfg.Params, cfg.Check, func(ctx context.Context, out io.Writer) error {
			return bench.E2E(ctx, out, cfg)
		}),
	}
	f := cmd.Flags()
	addHostsFlags(f, &cfg.HostsConfig)
	f.StringArrayVar(&params, "param", nil, "transport parameter k=v (repeatable), e.g. tls=tcp")
	addInProcessFlag(f, &cfg.Reference)
	f.IntVar(&cfg.Pulls, "pulls", 200, "sequential pulls measured")
	return cmd
}

func newBenchRanks() *cobra.Command {
	var cfg bench.HostsConfig
	cmd := &cobra.Command{
		Use:   "ranks",
		Short: "pulls over two engines of two ranks each, coordinated through etcd against the same ranks run independently",
		Long: `ranks measures engines of two ranks each (a host and a fake transport per
rank), coordinated through a rank group (embedded etcd) against independent
hosts, interleaved, and prints goal name=rank-cost ...`,
		Args: cobra.NoArgs,
		RunE: benchRun(nil, nil, cfg.Check, func(ctx context.Context, out io.Writer) error {
			return bench.Ranks(ctx, out, cfg)
		}),
	}
	addHostsFlags(cmd.Flags(), &cfg)
	return cmd
}
