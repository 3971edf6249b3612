package main

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/custody-dev/custody/internal/bench"
	"github.com/custody-dev/custody/internal/drive"
)

// benchTimeout bounds one run of a benchmark.
const benchTimeout = 30 * time.Minute

// newBenchCmd returns `custody bench` and its subcommands, one per
// measurement (package bench). Run without a subcommand it takes the flags
// it took before it had subcommands, for one release (addBenchAlias).
func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "measure transports, the process boundary and hosts, each against its references in the same run",
		Long: "bench runs one measurement per subcommand, its references beside it in the same run, and prints a table and\n" +
			"the lines CI reads (goal ..., ratio ...). Without a subcommand it takes, for one release, the flags it took before\n" +
			"it had subcommands (--e2e, --e2e --ranks 2, --sdk, --plugin ...) and runs the subcommand they name.",
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newBenchBW(), newBenchNIXL(), newBenchSDK(), newBenchE2E(), newBenchRanks())
	addBenchAlias(cmd)
	return cmd
}

func init() {
	rootCmd.AddCommand(newBenchCmd(), &cobra.Command{
		Use:    bench.EchoCommand + " SOCKET",
		Short:  "serve a bare gRPC health service on a unix socket until stdin closes (the reference of bench e2e)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE:   func(_ *cobra.Command, args []string) error { return bench.ServeEcho(args[0], os.Stdin) },
	})
}

// benchRun is the RunE of a benchmark: it parses the --param flags into
// *into (when params is not nil), checks the configuration and runs the
// benchmark under benchTimeout, printing to the command's output.
func benchRun(params *[]string, into *map[string]string, check func() error, run func(context.Context, io.Writer) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if params != nil {
			p, err := parseParams(*params)
			if err != nil {
				return err
			}
			*into = p
		}
		if err := check(); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), benchTimeout)
		defer cancel()
		return run(ctx, cmd.OutOrStdout())
	}
}

// addPluginFlags adds the flags naming the transport binary (default: the
// named one next to custody) and its parameters.
func addPluginFlags(f *pflag.FlagSet, plugin *string, name string, params *[]string) {
	f.StringVar(plugin, "plugin", defaultPlugin(name), "transport plugin binary")
	f.StringArrayVar(params, "param", nil, "transport parameter k=v (repeatable), e.g. tls=tcp")
}

// addRoundFlags adds the flags of a transport benchmark's rounds, of each
// what.
func addRoundFlags(f *pflag.FlagSet, r *bench.Rounds, what string) {
	f.DurationVar(&r.MinTime, "min-time", time.Second, "least time measured per "+what)
	f.IntVar(&r.Repeat, "repeat", 3, "rounds per "+what+", ours and the references interleaved; the best of each is reported")
}

// addInProcessFlag adds the flag naming the program of the in-process
// references.
func addInProcessFlag(f *pflag.FlagSet, reference *string) {
	f.StringVar(reference, "in-process", sibling(drive.ReferenceProgram), "the program that measures the transport in process (make build builds it next to custody)")
}

// addHostsFlags adds the flags of the host benchmarks.
func addHostsFlags(f *pflag.FlagSet, c *bench.HostsConfig) {
	f.StringVar(&c.Transport, "transport", "fake", "the hosts' transport, fake or ucx")
	f.StringVar(&c.Custody, "custody", "", "the custody binary the hosts run (default: this one)")
	f.IntVar(&c.Concurrency, "concurrency", 64, "pulls in flight for the throughput run")
	f.DurationVar(&c.Duration, "duration", 3*time.Second, "length of the throughput run")
	f.IntVar(&c.BlockSize, "block-size", 16<<10, "bytes per block")
	f.DurationVar(&c.Poll, "poll", 0, "poll GetFinished at this interval instead of watching the stream (the old way, for comparison)")
}
