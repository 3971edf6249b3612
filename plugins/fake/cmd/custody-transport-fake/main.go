// Command custody-transport-fake is the fake transport (package fake) as a
// plugin process, launched by the custody host with plugin.Launch. Its
// behaviour, faults included, is set by Open's parameters; a crash fault
// ends the process (exit code 3), as a real transport's crash would. A
// misbehave mode in CUSTODY_FAKE_MISBEHAVE (fake.MisbehaveEnv) is in force
// from the start, before Open too (fake.WithMisbehave); an unknown one
// ends the process at once (exit code 2), naming it.
package main

import (
	"fmt"
	"os"

	"github.com/custody-dev/custody/plugins/fake"
	"github.com/custody-dev/custody/sdk/plugin"
)

func main() {
	opts := []fake.Option{fake.WithExitOnCrash()}
	if mode := os.Getenv(fake.MisbehaveEnv); mode != "" {
		o, err := fake.WithMisbehave(mode)
		if err != nil {
			fmt.Fprintf(os.Stderr, "custody-transport-fake: %s: %v\n", fake.MisbehaveEnv, err)
			os.Exit(2)
		}
		opts = append(opts, o)
	}
	plugin.Serve(fake.New(opts...))
}
