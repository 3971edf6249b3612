package plugin

import (
	"context"
	"os"
	"sync"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/custody-dev/custody/sdk"
	pb "github.com/custody-dev/custody/sdk/plugin/proto/custody/transport/v1"
)

// ringServing is the plugin's half of the rings' negotiation: the gRPC
// server answers AttachRings with it, and tells it of Posts and Releases
// that still came over gRPC (too large for a ring), so that the pump
// follows those handles too.
type ringServing struct {
	log   hclog.Logger
	mu    sync.Mutex
	rings *ringServer // nil until attached, and again once detached
}

// AttachRings maps the host's ring file and starts serving it. It is
// refused (UNIMPLEMENTED) when the process runs with
// CUSTODY_TRANSPORT_RINGS=off, and once rings are attached.
func (s *grpcServer) AttachRings(ctx context.Context, req *pb.AttachRingsRequest) (*pb.AttachRingsResponse, error) {
	if os.Getenv(ringsEnv) == "off" {
		return nil, status.Error(codes.Unimplemented, "rings are off in this transport process ("+ringsEnv+"=off); stay on gRPC")
	}
	if req.GetVersion() != ringVersion {
		return nil, statusError(sdk.Errorf(sdk.CodeUnsupported, "AttachRings: ring layout version %d; this plugin speaks %d", req.GetVersion(), ringVersion))
	}
	s.ringServing.mu.Lock()
	defer s.ringServing.mu.Unlock()
	if s.rings != nil {
		select {
		case <-s.rings.done:
		default:
			return nil, statusError(sdk.Errorf(sdk.CodeInvalidArgument, "AttachRings: rings are attached already; a process serves one pair"))
		}
	}
	mem, l, err := attachRingFile(req.GetPath())
	if err != nil {
		return nil, statusError(sdk.Errorf(sdk.CodeInvalidArgument, "AttachRings: %v", err))
	}
	log := s.log
	if log == nil {
		log = hclog.NewNullLogger()
	}
	rs := newRingServer(ctx, s.impl, mem, l, log.Named("rings"), req.GetReleaseTerminal())
	rs.start()
	s.rings = rs
	return &pb.AttachRingsResponse{Events: rs.events != nil, Prompt: rs.waker != nil, ReleaseTerminal: rs.releaseTerminal}, nil
}

func (s *ringServing) current() *ringServer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rings
}

func (s *ringServing) postedOverGRPC(ctx context.Context, res []sdk.PostResult) {
	if rs := s.current(); rs != nil {
		rs.trackPosted(ctx, res)
	}
}

func (s *ringServing) releasedOverGRPC(ids []sdk.HandleID, errs []error) {
	if rs := s.current(); rs != nil {
		rs.untrackReleased(ids, errs)
	}
}
