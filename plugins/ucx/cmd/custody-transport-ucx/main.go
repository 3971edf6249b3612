// Command custody-transport-ucx is the UCX transport as a plugin process:
// one agent per process, launched by the custody host (plugin.Launch).
package main

import (
	"github.com/custody-dev/custody/plugins/ucx"
	"github.com/custody-dev/custody/sdk/plugin"
)

func main() { plugin.Serve(ucx.New()) }
