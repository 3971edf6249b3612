// Command custody is the custody host: it serves an engine rank, runs the
// demo, checks transports against the conformance suite, and measures them.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// rootCmd is the `custody` command; each subcommand adds itself from its own
// file with rootCmd.AddCommand in an init function.
var rootCmd = &cobra.Command{
	Use:           "custody",
	Short:         "custody owns every KV-cache transfer resource and runs transports as fenced processes",
	SilenceUsage:  true,
	SilenceErrors: true,
}

func main() {
	if err := rootCmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "custody:", err)
		os.Exit(1)
	}
}
