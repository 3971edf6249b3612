//go:build nixl

// Command custody-transport-nixl is the NIXL transport as a plugin
// process: one nixlAgent per process, launched by the custody host
// (plugin.Launch). It builds only with the nixl build tag against an
// installed NIXL (docs/nixl.md).
package main

import (
	"github.com/custody-dev/custody/plugins/nixl"
	"github.com/custody-dev/custody/sdk/plugin"
)

func main() { plugin.Serve(nixl.New()) }
