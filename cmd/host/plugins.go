package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
	"github.com/custody-dev/custody/sdk/plugin/agent"
)

func init() {
	pluginsCmd := &cobra.Command{Use: "plugins", Short: "inspect transport plugins"}
	var params []string
	describeCmd := &cobra.Command{
		Use:   "describe PATH",
		Short: "launch a transport and print what Describe says",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := parseParams(params)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			d, err := describePlugin(ctx, args[0], p)
			if err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(d)
		},
	}
	describeCmd.Flags().StringArrayVar(&params, "param", nil, "transport parameter k=v (repeatable)")
	pluginsCmd.AddCommand(describeCmd)
	rootCmd.AddCommand(pluginsCmd)
}

// describePlugin launches the transport at path, opens it with params (what
// a transport promises can depend on them) and returns its Description.
func describePlugin(ctx context.Context, path string, params map[string]string) (sdk.Description, error) {
	a, err := agent.Open(ctx, agent.Launch(path, plugin.LaunchOptions{}), "describe", params)
	if err != nil {
		return sdk.Description{}, fmt.Errorf("%s: %w", path, err)
	}
	d, err := a.Transport.Describe(ctx)
	if err != nil {
		return sdk.Description{}, errors.Join(fmt.Errorf("describe %s: %w", path, err), a.Close(ctx))
	}
	return d, a.Close(ctx)
}
