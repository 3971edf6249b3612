package plugin

import (
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/custody-dev/custody/internal/heapfloor"
	"github.com/custody-dev/custody/sdk"
)

// Serve runs impl as a transport plugin: the whole of a transport binary's
// main is
//
//	func main() { plugin.Serve(mytransport.New()) }
//
// It speaks gRPC, serves the shared-memory rings the host offers at Open
// (CUSTODY_TRANSPORT_RINGS=off refuses them), announces contract major
// version ContractMajor in
// the handshake, and logs as JSON to stderr, which the host's logger
// re-emits; CUSTODY_TRANSPORT_LOG_LEVEL (trace, debug, info, warn, error;
// default info) sets the plugin's level. It keeps a heap floor, so that the
// garbage collector of a process with a small heap and a busy data path
// does not run dozens of times a second: CUSTODY_TRANSPORT_HEAP_FLOOR_MIB
// (default 32, 0 for none) MiB of address space counted as live heap,
// never touched, at the cost of up to about as much garbage held between
// collections (internal/heapfloor). Launched by Launch, it dies with
// its host: it exits at once, before any other work, when the host is
// already gone, and the moment the host goes later (lifeline.go). It
// returns when the host shuts the plugin down. Started by hand,
// without the host, it says it is a plugin and exits with status 1.
func Serve(impl sdk.Transport) {
	holdLifeline() // before any other work: a host already gone ends the process here
	logger := hclog.New(&hclog.LoggerOptions{
		Name:       "custody-transport",
		Level:      hclog.LevelFromString(os.Getenv("CUSTODY_TRANSPORT_LOG_LEVEL")),
		Output:     os.Stderr,
		JSONFormat: true,
	})
	if impl == nil {
		logger.Error("plugin.Serve called with a nil Transport; pass the transport to serve")
		os.Exit(1)
	}
	floor, err := heapfloor.FromEnv()
	if err != nil {
		logger.Error("cannot serve transport", "error", err)
		os.Exit(1)
	}
	heapfloor.Keep(floor)
	major, err := servedMajor()
	if err != nil {
		logger.Error("cannot serve transport", "error", err)
		os.Exit(1)
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: handshake(major),
		Plugins:         plugin.PluginSet{pluginName: &grpcPlugin{impl: impl, log: logger}},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			opts = append(opts, grpc.MaxRecvMsgSize(maxMessageBytes), grpc.MaxSendMsgSize(maxMessageBytes))
			return grpc.NewServer(opts...)
		},
		Logger: logger,
	})
}
