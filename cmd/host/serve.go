package main

import (
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/custody-dev/custody/host"
)

func init() {
	var config string
	cmd := &cobra.Command{
		Use:   "serve --config FILE",
		Short: "run a custody host for one engine rank until SIGINT or SIGTERM",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := host.LoadConfig(config)
			if err != nil {
				return err
			}
			stopProfile, err := startProfile(cfg.Name)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log := hclog.New(&hclog.LoggerOptions{Name: "custody." + cfg.Name, Level: hclog.LevelFromString(cfg.LogLevel), Output: os.Stderr})
			return errors.Join(host.Serve(ctx, cfg, log, nil), stopProfile())
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "host configuration (YAML)")
	_ = cmd.MarkFlagRequired("config")
	rootCmd.AddCommand(cmd)
}
