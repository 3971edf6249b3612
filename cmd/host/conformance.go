package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/sdk/plugin"
)

// newConformanceCmd returns `custody conformance`: the conformance suite
// (package conformance) run against a transport binary outside go test,
// each agent a process of that binary. It prints a table per capability
// and fails, naming the failed checks, when any check fails.
func newConformanceCmd() *cobra.Command {
	var (
		pluginPath, run, junit, jsonOut, dir, rings string
		params                                      []string
		timeout                                     time.Duration
		repeat                                      int
		list, verbose                               bool
	)
	cmd := &cobra.Command{
		Use:   "conformance",
		Short: "check a transport binary against the transport contract",
		Long: "conformance launches the transport at --plugin (two or more processes per check) and runs every check of the\n" +
			"conformance suite against it: data, Poll/Release/Cancel semantics, refused teardown, notifications, peer loss,\n" +
			"bad arguments, limits. What the transport does not claim is skipped with the reason. Exits 1 if any check fails.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if list {
				for _, c := range conformance.Rules() {
					fmt.Fprintf(cmd.OutOrStdout(), "%s\n    %s\n", c.Name, c.Rule)
				}
				return nil
			}
			p, err := parseParams(params)
			if err != nil {
				return err
			}
			if repeat < 1 {
				return fmt.Errorf("--repeat %d: give at least 1 (how many times each check exercises its rule)", repeat)
			}
			if rings != "on" && rings != "off" {
				return fmt.Errorf("--rings %q: say on or off", rings)
			}
			var match func(string) bool
			if run != "" {
				re, err := regexp.Compile(run)
				if err != nil {
					return fmt.Errorf("--run %q: %w", run, err)
				}
				match = re.MatchString
			}
			level := hclog.Off
			if verbose {
				level = hclog.Debug
			}
			logger := hclog.New(&hclog.LoggerOptions{Name: "transport", Level: level, Output: cmd.ErrOrStderr()})
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			rep, err := conformance.Execute(ctx, conformance.Config{
				New:          conformance.PluginFactory(pluginPath, plugin.LaunchOptions{Logger: logger, DisableRings: rings == "off"}),
				Params:       p,
				Dir:          dir,
				CheckTimeout: timeout,
				Repeat:       repeat,
				Match:        match,
			})
			if err != nil {
				return err
			}
			if err := rep.WriteTable(cmd.OutOrStdout()); err != nil {
				return err
			}
			if err := writeReport(junit, rep.WriteJUnit); err != nil {
				return err
			}
			if err := writeReport(jsonOut, rep.WriteJSON); err != nil {
				return err
			}
			var failed []string
			for _, r := range rep.Results {
				if r.Status == conformance.StatusFail {
					failed = append(failed, r.Name)
				}
			}
			if len(failed) > 0 {
				return fmt.Errorf("conformance: %d of %d checks failed: %s", len(failed), len(rep.Results), strings.Join(failed, ", "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&pluginPath, "plugin", defaultPlugin("fake"), "transport plugin binary (built with plugin.Serve)")
	f.StringArrayVar(&params, "param", nil, "transport parameter k=v passed to every agent's Open (repeatable)")
	f.StringVar(&run, "run", "", "run only the checks whose group/name matches this regular expression")
	f.StringVar(&junit, "junit", "", "also write the results as JUnit XML to this file")
	f.StringVar(&jsonOut, "json", "", "also write the results as JSON to this file")
	f.StringVar(&dir, "dir", "", "directory for region files (default /dev/shm, else the temp directory)")
	f.DurationVar(&timeout, "timeout", 3*time.Minute, "bound of one check, cleanup included")
	f.IntVar(&repeat, "repeat", 100, "how many times each check exercises its rule, concurrently: a transport breaking a rule one time in ten passes with probability 0.9^repeat (2.7e-5 at 100)")
	f.BoolVar(&list, "list", false, "list the checks, each with the rule it holds a transport to, and exit")
	f.BoolVar(&verbose, "verbose", false, "show the transport processes' logs")
	f.StringVar(&rings, "rings", "on", "on: Post, Release and completions through the shared-memory rings when the transport offers them; off: gRPC alone")
	return cmd
}

func init() { rootCmd.AddCommand(newConformanceCmd()) }

// writeReport writes one report format to path, when a path is given.
func writeReport(path string, write func(w io.Writer) error) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("write report %s: %w", path, err)
	}
	return f.Close()
}
