package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/custody-dev/custody/internal/bench"
)

// benchAliasFlags are the flags `custody bench` took before it had
// subcommands, but for the three that chose the measurement (--e2e, --sdk,
// --ranks): each is passed on to the flag of the same name of the chosen
// subcommand, and ignored where that has none, as the measurement ignored
// it then. They go in the release after the one that deprecated them.
var benchAliasFlags = []string{"plugin", "param", "sizes", "perftest", "min-time", "repeat", "transport", "custody",
	"in-process", "pulls", "concurrency", "duration", "block-size", "poll", "idle", "nixl-reference", "nixl-ucx"}

// addBenchAlias makes `custody bench` without a subcommand run the
// subcommand its old flags name, after a one-line deprecation note on
// stderr: --e2e is e2e, --e2e --ranks 2 is ranks, --sdk is sdk, and none
// of them is nixl when --plugin is the NIXL transport, else bw.
func addBenchAlias(cmd *cobra.Command) {
	var (
		e2e, sdkMode bool
		ranks        int
	)
	f := cmd.Flags()
	f.BoolVar(&e2e, "e2e", false, "deprecated: custody bench e2e")
	f.BoolVar(&sdkMode, "sdk", false, "deprecated: custody bench sdk")
	f.IntVar(&ranks, "ranks", 1, "deprecated: with --e2e, 2 is custody bench ranks")
	for _, name := range benchAliasFlags {
		f.StringArray(name, nil, "deprecated: the flag of the subcommand")
	}
	f.VisitAll(func(fl *pflag.Flag) { fl.Hidden = true })
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		old, sub, err := benchAliasTarget(cmd, e2e, sdkMode, ranks)
		if err != nil {
			return err
		}
		target, _, err := cmd.Find([]string{sub})
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "custody: %s is deprecated and goes in the next release: use custody bench %s\n", old, sub)
		for _, name := range benchAliasFlags {
			if target.Flags().Lookup(name) == nil {
				continue
			}
			for _, v := range aliasValues(cmd, name) {
				if err := target.Flags().Set(name, v); err != nil {
					return fmt.Errorf("--%s %q: %w", name, v, err)
				}
			}
		}
		target.SetContext(cmd.Context())
		return target.RunE(target, nil)
	}
}

// benchAliasTarget names the old form of the command and the subcommand
// it stands for.
func benchAliasTarget(cmd *cobra.Command, e2e, sdkMode bool, ranks int) (old, sub string, err error) {
	switch {
	case ranks != 1 && !e2e:
		return "", "", fmt.Errorf("--ranks %d: only --e2e measures ranks", ranks)
	case e2e && sdkMode:
		return "", "", fmt.Errorf("--e2e and --sdk measure different things; pass one of them")
	case e2e && ranks == 1:
		return "custody bench --e2e", "e2e", nil
	case e2e && ranks == 2:
		return "custody bench --e2e --ranks 2", "ranks", nil
	case e2e:
		return "", "", fmt.Errorf("--ranks %d: want 1 or 2", ranks)
	case sdkMode:
		return "custody bench --sdk", "sdk", nil
	}
	plugins := aliasValues(cmd, "plugin")
	path := defaultPlugin("ucx")
	if len(plugins) > 0 {
		path = plugins[len(plugins)-1]
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), benchTimeout)
	defer cancel()
	if name, err := bench.TransportName(ctx, path); err == nil && name == "nixl" {
		return "custody bench without a subcommand", "nixl", nil
	}
	return "custody bench without a subcommand", "bw", nil
}

// aliasValues are the values an alias flag was given, in order (an empty
// one included: --perftest "" skips ucx_perftest).
func aliasValues(cmd *cobra.Command, name string) []string {
	return cmd.Flags().Lookup(name).Value.(pflag.SliceValue).GetSlice()
}
