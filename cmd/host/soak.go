package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/custody-dev/custody/demo"
)

func init() {
	var (
		o       demo.Options
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "soak",
		Short: "run the demo long: many requests, every fault kind all along, transport processes killed, every byte checked",
		Long: "soak runs a prefill and a decode host, each a `custody serve` process with its own fake transport process, " +
			"through --requests requests while the fake injects every fault kind it knows and --kills transport processes are killed " +
			"from outside. It exits non-zero unless no block was corrupted, no failure missed its invalid blocks, " +
			"no request was reported twice or never, nothing leaked, every fault kind fired and every kill landed.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Custody, err = os.Executable(); err != nil {
				return err
			}
			o.Soak = true
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			s, err := demo.Run(ctx, o)
			if s != nil {
				s.Print(cmd.OutOrStdout())
			}
			if err != nil {
				return err
			}
			line, err := s.SoakVerdict(o.Kills, true)
			fmt.Fprintf(cmd.OutOrStdout(), "soak: %s in %v\n", line, s.Elapsed.Round(time.Second))
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "soak: every byte verified, every request reported once, nothing leaked")
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Requests, "requests", 10000, "requests to run")
	f.IntVar(&o.Kills, "kills", 20, "transport processes to kill (SIGKILL) from outside, spread over the run")
	f.IntVar(&o.Concurrency, "concurrency", 8, "requests in flight at once")
	f.IntVar(&o.Window, "window", 64, "checked requests whose blocks are kept for a second audit before reuse")
	f.Uint64Var(&o.Seed, "seed", 1, "seed of the request mix and the faults")
	f.DurationVar(&timeout, "timeout", 3*time.Hour, "give up after this long")
	f.StringVar(&o.Dir, "dir", "", "keep configs, logs, fault logs and pools here (default: a temporary directory)")
	rootCmd.AddCommand(cmd)
}
