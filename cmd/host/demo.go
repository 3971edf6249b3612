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
		o      demo.Options
		params []string
		ranks  int
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "run a prefill and a decode host with faults injected and check every byte",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := parseParams(params)
			if err != nil {
				return err
			}
			o.Params = p
			if o.Custody, err = os.Executable(); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Minute)
			defer cancel()
			switch ranks {
			case 1:
			case 2:
				if !cmd.Flags().Changed("requests") {
					o.Requests = 40
				}
				if o.BlockSize == 0 {
					o.BlockSize = 16 << 10
				}
				s, err := demo.RunRanks(ctx, o)
				if s != nil {
					s.Print(cmd.OutOrStdout())
				}
				if err != nil {
					return err
				}
				if !s.Clean() {
					return fmt.Errorf("ranks demo: %d outcomes differed between ranks, %d corrupted blocks, %d failures without their invalid blocks, %d leaks; poisoned pools %d of 2, refused on them %d of 2; rank with another block size: %s",
						s.Disagreed, s.Corrupted, s.InvalidMissing, len(s.Leaks), s.PoisonedPools, s.PoisonRefused, orNotRefused(s.Refused))
				}
				fmt.Fprintln(cmd.OutOrStdout(), "ranks demo: every byte verified, every rank agreed, the poisoned pool refused on every rank, no leak")
				return nil
			default:
				return fmt.Errorf("--ranks %d: want 1 or 2", ranks)
			}
			s, err := demo.Run(ctx, o)
			if s != nil {
				s.Print(cmd.OutOrStdout())
			}
			if err != nil {
				return err
			}
			if !s.Clean() {
				return fmt.Errorf("demo found %d corrupted blocks, %d failed requests without their invalid blocks, %d duplicate reports and %d leaks",
					s.Corrupted, s.InvalidMissing, s.Duplicates, len(s.Leaks))
			}
			fmt.Fprintln(cmd.OutOrStdout(), "demo: every byte verified, nothing leaked")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Transport, "transport", "fake", "transport: fake, ucx or nixl (custody-transport-nixl next to this binary: make test-nixl builds it)")
	f.StringArrayVar(&params, "param", nil, "extra transport parameter k=v for both hosts (repeatable)")
	f.IntVar(&o.Requests, "requests", 160, "requests to run")
	f.IntVar(&o.Concurrency, "concurrency", 8, "requests in flight at once")
	f.Uint64Var(&o.Seed, "seed", 1, "seed of the request mix and the faults")
	f.BoolVar(&o.UnsafeEagerRelease, "unsafe-eager-release", false, "negative control: release handles and reuse their blocks whether or not their transfers finished; the demo must then find corruption")
	f.IntVar(&ranks, "ranks", 1, "ranks per engine: 2 runs a prefill and a decode engine of two ranks each, agreeing through an embedded etcd, with rank-level faults")
	f.StringVar(&o.Dir, "dir", "", "keep configs, logs and pools here (default: a temporary directory)")
	rootCmd.AddCommand(cmd)
}

func orNotRefused(s string) string {
	if s == "" {
		return "NOT refused"
	}
	return "refused"
}
