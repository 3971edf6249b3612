package plugin

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/custody-dev/custody/sdk"
	pb "github.com/custody-dev/custody/sdk/plugin/proto/custody/transport/v1"
)

// This file is what the host and a transport plugin agree on before any
// call: the go-plugin handshake and the one plugin the process serves.

// pluginName is the one plugin a transport process serves.
const pluginName = "transport"

// magicCookie keeps a transport binary from being mistaken for anything
// else: run by hand, without it, the binary says so and exits. It is not a
// security measure.
const (
	magicCookieKey   = "CUSTODY_TRANSPORT_PLUGIN"
	magicCookieValue = "f3b0c1a2-custody-transport-6d9e"
)

// servedContractMajor overrides the contract major version a plugin built
// from this package announces in its handshake. Empty means ContractMajor.
// It exists so that tests can build a plugin of another major version:
//
//	go build -ldflags "-X github.com/custody-dev/custody/sdk.servedContractMajor=2"
var servedContractMajor = ""

// servedMajor is the major version Serve announces.
func servedMajor() (uint, error) {
	if servedContractMajor == "" {
		return sdk.ContractMajor, nil
	}
	v, err := strconv.ParseUint(servedContractMajor, 10, 32)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("sdk.servedContractMajor %q set at link time is not a positive integer; rebuild without it or with a number", servedContractMajor)
	}
	return uint(v), nil
}

// handshake is the go-plugin handshake for contract major version major:
// go-plugin refuses a plugin whose ProtocolVersion differs.
func handshake(major uint) plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		ProtocolVersion:  major,
		MagicCookieKey:   magicCookieKey,
		MagicCookieValue: magicCookieValue,
	}
}

// maxMessageBytes bounds one gRPC message each way. Batches are how the
// contract stays fast, so they must not hit gRPC's 4 MiB default.
const maxMessageBytes = 256 << 20

// grpcPlugin is the go-plugin binding of a Transport: the server half in
// the plugin process, the client half in the host.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// impl is the transport served, log the plugin's logger (plugin side
	// only).
	impl sdk.Transport
	log  hclog.Logger
	// client settings (host side only).
	timeout time.Duration
	name    string
}

// GRPCServer registers the transport with the plugin's gRPC server.
func (p *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterTransportServer(s, &grpcServer{impl: p.impl, ringServing: ringServing{log: p.log}})
	return nil
}

// GRPCClient returns the host's client. done is canceled by go-plugin when
// the plugin process exits; every call is tied to it.
func (p *grpcPlugin) GRPCClient(done context.Context, _ *plugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	return &grpcClient{rpc: pb.NewTransportClient(cc), done: done, timeout: p.timeout, name: p.name}, nil
}
