// Command custody-transport-memcopy is the memcopy example transport as a
// plugin process, launched by the custody host with plugin.Launch.
package main

import (
	"github.com/custody-dev/custody/examples/memcopy"
	"github.com/custody-dev/custody/sdk/plugin"
)

func main() {
	plugin.Serve(memcopy.New())
}
