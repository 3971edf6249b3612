package plugin

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/custody-dev/custody/sdk"
	pb "github.com/custody-dev/custody/sdk/plugin/proto/custody/transport/v1"
)

// grpcServer serves a Transport over gRPC inside the plugin process. It
// holds no logic of its own: each call converts the request, calls the
// transport and converts the answer, so the host sees exactly what the
// transport returned. A call-level error becomes a gRPC status carrying its
// Code and message (statusError); item errors travel in the response.
type grpcServer struct {
	pb.UnimplementedTransportServer
	impl sdk.Transport
	ringServing
}

var _ pb.TransportServer = (*grpcServer)(nil)

func (s *grpcServer) Describe(ctx context.Context, _ *pb.DescribeRequest) (*pb.DescribeResponse, error) {
	d, err := s.impl.Describe(ctx)
	if err != nil {
		return nil, statusError(err)
	}
	return descriptionOf(d), nil
}

func (s *grpcServer) Open(ctx context.Context, req *pb.OpenRequest) (*pb.Empty, error) {
	if err := s.impl.Open(ctx, openRequestFrom(req)); err != nil {
		return nil, statusError(err)
	}
	return &pb.Empty{}, nil
}

func (s *grpcServer) Close(ctx context.Context, _ *pb.Empty) (*pb.Empty, error) {
	if err := s.impl.Close(ctx); err != nil {
		return nil, statusError(err)
	}
	return &pb.Empty{}, nil
}

func (s *grpcServer) RegisterMemory(ctx context.Context, req *pb.RegisterMemoryRequest) (*pb.RegisterMemoryResponse, error) {
	regs, err := s.impl.RegisterMemory(ctx, regionsFrom(req))
	if err != nil {
		return nil, statusError(err)
	}
	return registrationsOf(regs), nil
}

func (s *grpcServer) DeregisterMemory(ctx context.Context, req *pb.IDs) (*pb.Statuses, error) {
	return statuses(s.impl.DeregisterMemory(ctx, idsFrom[sdk.RegionID](req)))
}

func (s *grpcServer) LocalMetadata(ctx context.Context, _ *pb.Empty) (*pb.LocalMetadataResponse, error) {
	md, err := s.impl.LocalMetadata(ctx)
	if err != nil {
		return nil, statusError(err)
	}
	return &pb.LocalMetadataResponse{Metadata: md}, nil
}

func (s *grpcServer) LoadPeers(ctx context.Context, req *pb.LoadPeersRequest) (*pb.LoadPeersResponse, error) {
	res, err := s.impl.LoadPeers(ctx, peerSpecsFrom(req))
	if err != nil {
		return nil, statusError(err)
	}
	return peerResultsOf(res), nil
}

func (s *grpcServer) UnloadPeers(ctx context.Context, req *pb.IDs) (*pb.Statuses, error) {
	return statuses(s.impl.UnloadPeers(ctx, idsFrom[sdk.PeerID](req)))
}

func (s *grpcServer) PrepareDescriptors(ctx context.Context, req *pb.PrepareDescriptorsRequest) (*pb.PrepareDescriptorsResponse, error) {
	res, err := s.impl.PrepareDescriptors(ctx, dlistSpecsFrom(req))
	if err != nil {
		return nil, statusError(err)
	}
	return dlistResultsOf(res), nil
}

func (s *grpcServer) ReleaseDescriptors(ctx context.Context, req *pb.IDs) (*pb.Statuses, error) {
	return statuses(s.impl.ReleaseDescriptors(ctx, idsFrom[sdk.DlistID](req)))
}

func (s *grpcServer) Post(ctx context.Context, req *pb.PostRequest) (*pb.PostResponse, error) {
	res, err := s.impl.Post(ctx, postSpecsFrom(req))
	if err != nil {
		return nil, statusError(err)
	}
	s.postedOverGRPC(ctx, res)
	return postResultsOf(res), nil
}

func (s *grpcServer) Poll(ctx context.Context, req *pb.IDs) (*pb.PollResponse, error) {
	res, err := s.impl.Poll(ctx, idsFrom[sdk.HandleID](req))
	if err != nil {
		return nil, statusError(err)
	}
	return handleStatusesOf(res), nil
}

// Cancel is Transport.Cancel. Under release at terminal, the transport
// says NOT_FOUND for a handle the pump released; the answer then waits
// until that handle's state is in the completion ring, where the host
// finds it and answers OK instead (ring.Client.Cancel).
func (s *grpcServer) Cancel(ctx context.Context, req *pb.IDs) (*pb.Statuses, error) {
	errs, err := s.impl.Cancel(ctx, idsFrom[sdk.HandleID](req))
	if err == nil {
		s.canceledOverGRPC(errs)
	}
	return statuses(errs, err)
}

func (s *grpcServer) Release(ctx context.Context, req *pb.IDs) (*pb.Statuses, error) {
	ids := idsFrom[sdk.HandleID](req)
	errs, err := s.impl.Release(ctx, ids)
	if err == nil {
		s.releasedOverGRPC(ids, errs)
	}
	return statuses(errs, err)
}

func (s *grpcServer) SendNotifications(ctx context.Context, req *pb.SendNotificationsRequest) (*pb.Statuses, error) {
	return statuses(s.impl.SendNotifications(ctx, outboundFrom(req)))
}

func (s *grpcServer) Notifications(ctx context.Context, req *pb.Max) (*pb.NotificationsResponse, error) {
	ns, err := s.impl.Notifications(ctx, int(req.GetMax()))
	if err != nil {
		return nil, statusError(err)
	}
	return notificationsOf(ns), nil
}

func (s *grpcServer) Resources(ctx context.Context, _ *pb.Empty) (*pb.ResourcesResponse, error) {
	r, err := s.impl.Resources(ctx)
	if err != nil {
		return nil, statusError(err)
	}
	return resourcesOf(r), nil
}

// Events answers UNIMPLEMENTED when the transport is no EventSource, so the
// host falls back to polling.
func (s *grpcServer) Events(ctx context.Context, req *pb.Max) (*pb.EventsResponse, error) {
	es, ok := s.impl.(sdk.EventSource)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "transport does not implement sdk.EventSource; poll instead")
	}
	evs, err := es.Events(ctx, int(req.GetMax()))
	if err != nil {
		return nil, statusError(err)
	}
	return eventsOf(evs), nil
}

// statuses converts the answer of a batched call that returns one error per
// item.
func statuses(errs []error, err error) (*pb.Statuses, error) {
	if err != nil {
		return nil, statusError(err)
	}
	return statusesOf(errs), nil
}
