package plugin

import (
	"context"
	"errors"
	"os"
	"sync"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/custody-dev/custody/sdk"
	pb "github.com/custody-dev/custody/sdk/plugin/proto/custody/transport/v1"
	"github.com/custody-dev/custody/sdk/plugin/ring"
)

// The rings' negotiation, both halves. After a successful Open the host
// creates the ring file and names it in one AttachRings call
// (attachRings); the plugin maps it and serves it (grpcServer.AttachRings)
// or refuses, and the host stays on gRPC. The host unlinks the file once
// the call returned, so that only the two mappings remain. Package ring's
// doc states the protocol.

// ringsEnv, set to "off" in a transport process's environment, makes it
// refuse rings: the host then stays on gRPC. It exists to test that
// fallback and to rule the rings out when debugging.
const ringsEnv = "CUSTODY_TRANSPORT_RINGS"

// attachRings offers the rings to the plugin after a successful Open. When
// the plugin does not take them, every call stays on gRPC.
func (p *Plugin) attachRings(ctx context.Context) {
	if p.noRings || p.rings.Load() != nil {
		return
	}
	mem, path, remove, err := ring.CreateFile(ring.DefaultLayout)
	if err != nil {
		p.log.Warn("rings: cannot create the ring file; staying on gRPC", "error", err)
		return
	}
	var resp *pb.AttachRingsResponse
	err = p.grpc.call(ctx, "AttachRings", func(ctx context.Context) error {
		var err error
		resp, err = p.grpc.rpc.AttachRings(ctx, &pb.AttachRingsRequest{Path: path, Version: ring.Version, ReleaseTerminal: p.releaseTerminal})
		return err
	})
	// Both sides mapped it (or never will): the name goes.
	remove()
	if err != nil {
		_ = ring.Unmap(mem)
		if errors.Is(err, sdk.ErrUnsupported) {
			p.log.Debug("rings: the transport does not offer them; staying on gRPC", "transport", p.grpc.name)
		} else {
			p.log.Warn("rings: the transport refused them; staying on gRPC", "transport", p.grpc.name, "error", err)
		}
		return
	}
	p.rings.Store(ring.NewClient(mem, ring.DefaultLayout, ring.ClientConfig{
		Name:     p.grpc.name,
		Timeout:  p.grpc.timeout,
		Done:     p.grpc.done,
		Shutdown: p.grpc.fenced,
		Kill:     p.Kill,
		Wake:     p.wake,
		Log:      p.log,
		Events:   resp.GetEvents(),
		Prompt:   resp.GetPrompt(),
		// The plugin may take release at terminal only when asked.
		ReleaseTerminal: p.releaseTerminal && resp.GetReleaseTerminal(),
	}))
}

// closeRings stops the rings and waits for their reader and for the
// fallback ticker (Kill, Stop).
func (p *Plugin) closeRings() {
	if r := p.rings.Load(); r != nil {
		r.Stop()
	}
	p.stopFallbackTicker()
}

// ringServing is the plugin's half of the rings' negotiation: the gRPC
// server answers AttachRings with it, and tells it of Posts, Releases and
// Cancels that still came over gRPC (a Post too large for a ring), so that
// the pump follows those handles too.
type ringServing struct {
	log   hclog.Logger
	mu    sync.Mutex
	rings *ring.Server // nil until attached, and again once detached
}

// AttachRings maps the host's ring file and starts serving it. It is
// refused (UNIMPLEMENTED) when the process runs with
// CUSTODY_TRANSPORT_RINGS=off, and once rings are attached.
func (s *grpcServer) AttachRings(ctx context.Context, req *pb.AttachRingsRequest) (*pb.AttachRingsResponse, error) {
	if os.Getenv(ringsEnv) == "off" {
		return nil, status.Error(codes.Unimplemented, "rings are off in this transport process ("+ringsEnv+"=off); stay on gRPC")
	}
	if req.GetVersion() != ring.Version {
		return nil, statusError(sdk.Errorf(sdk.CodeUnsupported, "AttachRings: ring layout version %d; this plugin speaks %d", req.GetVersion(), ring.Version))
	}
	s.ringServing.mu.Lock()
	defer s.ringServing.mu.Unlock()
	if s.rings != nil {
		select {
		case <-s.rings.Done():
		default:
			return nil, statusError(sdk.Errorf(sdk.CodeInvalidArgument, "AttachRings: rings are attached already; a process serves one pair"))
		}
	}
	mem, l, err := ring.AttachFile(req.GetPath())
	if err != nil {
		return nil, statusError(sdk.Errorf(sdk.CodeInvalidArgument, "AttachRings: %v", err))
	}
	log := s.log
	if log == nil {
		log = hclog.NewNullLogger()
	}
	rs := ring.NewServer(ctx, s.impl, mem, l, log.Named("rings"), req.GetReleaseTerminal())
	s.rings = rs
	return &pb.AttachRingsResponse{Events: rs.ForwardsEvents(), Prompt: rs.Prompt(), ReleaseTerminal: rs.ReleasesAtTerminal()}, nil
}

func (s *ringServing) current() *ring.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rings
}

func (s *ringServing) postedOverGRPC(ctx context.Context, res []sdk.PostResult) {
	if rs := s.current(); rs != nil {
		rs.Posted(ctx, res)
	}
}

func (s *ringServing) releasedOverGRPC(ids []sdk.HandleID, errs []error) {
	if rs := s.current(); rs != nil {
		rs.Released(ids, errs)
	}
}

func (s *ringServing) canceledOverGRPC(errs []error) {
	if rs := s.current(); rs != nil {
		rs.Canceled(errs)
	}
}
