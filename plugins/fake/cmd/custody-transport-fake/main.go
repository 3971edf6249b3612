// Command custody-transport-fake is the fake transport (package fake) as a
// plugin process, launched by the custody host with plugin.Launch. Its
// behaviour, faults included, is set by Open's parameters; a crash fault
// ends the process (exit code 3), as a real transport's crash would.
package main

import (
	"github.com/custody-dev/custody/plugins/fake"
	"github.com/custody-dev/custody/sdk/plugin"
)

func main() {
	plugin.Serve(fake.New(fake.WithExitOnCrash()))
}
