package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/host/group"
)

// groupFlags name one engine's group: a host's configuration, or an
// engine and its etcd endpoints.
type groupFlags struct {
	config        string
	engine        string
	endpoints     []string
	ca, cert, key string
	timeout       time.Duration
}

func (f *groupFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.config, "config", "", "a ranked host's configuration (YAML): its group's engine and coordinator")
	cmd.Flags().StringVar(&f.engine, "engine", "", "the engine (group.engine), with --endpoints")
	cmd.Flags().StringSliceVar(&f.endpoints, "endpoints", nil, "etcd client endpoints (with an embedded etcd: rank 0's listen address)")
	cmd.Flags().StringVar(&f.ca, "cacert", "", "with --endpoints: CA file verifying etcd's certificate")
	cmd.Flags().StringVar(&f.cert, "cert", "", "with --endpoints: client certificate file")
	cmd.Flags().StringVar(&f.key, "key", "", "with --endpoints: client key file")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 5*time.Second, "bound on each etcd call")
}

// dial connects an operator to the group the flags name.
func (f *groupFlags) dial() (*group.Operator, error) {
	switch {
	case f.config != "" && (f.engine != "" || len(f.endpoints) > 0):
		return nil, errors.New("give either --config or --engine with --endpoints, not both")
	case f.config != "":
		cfg, err := host.LoadConfig(f.config)
		if err != nil {
			return nil, err
		}
		if cfg.Group == nil {
			return nil, fmt.Errorf("%s has no group section: the host decides alone, and keeps no poison in etcd", f.config)
		}
		return group.Dial(cfg.Group.Engine, cfg.Group.Coordinator, f.timeout)
	case f.engine == "" || len(f.endpoints) == 0:
		return nil, errors.New("give --config FILE, or --engine E with --endpoints HOST:PORT")
	}
	cc := group.CoordinatorConfig{Endpoints: f.endpoints, TLS: group.TLSConfig{CAFile: f.ca, CertFile: f.cert, KeyFile: f.key}}
	return group.Dial(f.engine, cc, f.timeout)
}

func newGroupCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "group",
		Short: "operate on an engine's rank group in etcd",
		Args:  cobra.NoArgs,
	}
	var lf groupFlags
	list := &cobra.Command{
		Use:   "poisoned (--config FILE | --engine E --endpoints HOST:PORT)",
		Short: "list the engine's poisoned pools",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			op, err := lf.dial()
			if err != nil {
				return err
			}
			defer op.Close()
			recs, err := op.Poisoned(cmd.Context())
			if err != nil {
				return err
			}
			for _, r := range recs {
				fmt.Fprintf(cmd.OutOrStdout(), "pool %q poisoned by rank %d (member %s) at %s: %s\n", r.Pool, r.Rank, r.Member, r.At.Format(time.RFC3339), r.Reason)
			}
			if len(recs) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no pool poisoned")
			}
			return nil
		},
	}
	lf.add(list)
	var cf groupFlags
	var pool string
	clear := &cobra.Command{
		Use:   "clear-poison --pool P (--config FILE | --engine E --endpoints HOST:PORT)",
		Short: "clear a pool's durable poison (rule 11) once its memory is known safe",
		Long: "clear-poison removes the pool's poison record from etcd. Ranks started from then on use the pool again; " +
			"a rank still running keeps refusing it until it restarts (poison is sticky). Clear it only once every rank's " +
			"engine stopped touching the pool's memory, for instance after the engines restarted.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			op, err := cf.dial()
			if err != nil {
				return err
			}
			defer op.Close()
			r, err := op.ClearPoison(cmd.Context(), pool)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cleared the poison of pool %q (set by rank %d at %s: %s); restart the ranks still running to use it again\n",
				r.Pool, r.Rank, r.At.Format(time.RFC3339), r.Reason)
			return nil
		},
	}
	cf.add(clear)
	clear.Flags().StringVar(&pool, "pool", "", "the poisoned pool")
	_ = clear.MarkFlagRequired("pool")
	cmd.AddCommand(list, clear)
	return cmd
}

func init() { rootCmd.AddCommand(newGroupCmd()) }
