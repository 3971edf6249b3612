package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/custody-dev/custody/internal/drive"
	"github.com/custody-dev/custody/sdk/plugin"
	"github.com/custody-dev/custody/sdk/plugin/agent"
)

func init() {
	var (
		pluginPath string
		params     []string
		size       int
		blocks     int
	)
	cmd := &cobra.Command{
		Use:   "copy",
		Short: "smoke test: move random bytes between two transport processes by WRITE and READ and verify them",
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := parseParams(params)
			if err != nil {
				return err
			}
			if size <= 0 || blocks <= 0 || size%blocks != 0 {
				return fmt.Errorf("--size %d must be a positive multiple of --blocks %d", size, blocks)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			defer cancel()
			return drive.Copy(ctx, cmd.OutOrStdout(), agent.Launch(pluginPath, plugin.LaunchOptions{}), p, size, blocks)
		},
	}
	cmd.Flags().StringVar(&pluginPath, "plugin", defaultPlugin("fake"), "transport plugin binary")
	cmd.Flags().StringArrayVar(&params, "param", nil, "transport parameter k=v (repeatable)")
	cmd.Flags().IntVar(&size, "size", 16<<20, "bytes per region")
	cmd.Flags().IntVar(&blocks, "blocks", 64, "descriptors per transfer")
	rootCmd.AddCommand(cmd)
}
