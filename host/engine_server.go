package host

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	enginev1 "github.com/custody-dev/custody/api/engine/v1"
	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/sdk"
)

// engineServer serves the engine API (api/engine/v1) over a Host.
type engineServer struct {
	enginev1.UnimplementedEngineServer
	h *Host
}

// engineWindow is the HTTP/2 flow-control window of the engine API's
// server, per stream and per connection. Setting it turns gRPC's
// bandwidth-delay estimator off: the estimator pings the peer after each
// burst of data it receives, and on the engine socket, where nearly every
// message is small, that ping and its acknowledgement add two frames, and
// their writes and wake-ups, to each call. 1 MiB holds a whole batch of
// reports (DefaultBatchBytes).
const engineWindow = 1 << 20

// EngineServerOptions are the gRPC options of the engine API's transport:
// NewEngineServer's, and those of a server meant to measure the same gRPC.
func EngineServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.InitialWindowSize(engineWindow), grpc.InitialConnWindowSize(engineWindow)}
}

// NewEngineServer returns a gRPC server serving h's engine API.
func NewEngineServer(h *Host) *grpc.Server {
	s := grpc.NewServer(append(EngineServerOptions(), grpc.UnaryInterceptor(validateUnary))...) // validate.go: numbers range-checked first
	enginev1.RegisterEngineServer(s, &engineServer{h: h})
	return s
}

// engineErr maps a host error to a gRPC status whose code says what the
// engine does next:
//   - Unavailable: the host stopped, its transport restarts, a peer's
//     handshake runs, the transport died mid-call or a peer disconnected;
//     retry.
//   - FailedPrecondition with an ErrorInfo (domain custody.engine.v1,
//     reason HANDSHAKE_FAILED, metadata peer): the peer's last handshake
//     attempt failed (ErrHandshakeFailed); the message names the peer and
//     the cause. A call after the backoff tries again.
//   - DeadlineExceeded: the caller's deadline, or a transport call's
//     (TIMEOUT); Canceled: the caller gave up.
//   - Internal: the transport failed (BACKEND); the host log says why.
//   - Unknown: whether a transport call took effect is unknown; its
//     request will be reported failed once its epoch is fenced.
//   - Aborted: a report cursor of another host process (ErrHostRestarted);
//     start again from cursor 0.
//   - FailedPrecondition: something still holds what the call would free
//     (BUSY, resources held); NotFound and Unimplemented from the transport
//     as they are.
//   - InvalidArgument: anything else, the engine's bad input, with the
//     message naming what was wrong.
func engineErr(err error) error {
	if err == nil {
		return nil
	}
	st := status.New(engineCode(err), err.Error())
	if st.Code() == codes.FailedPrecondition {
		st = withHandshakeInfo(st, err) // handshake_backoff.go
	}
	return st.Err()
}

func engineCode(err error) codes.Code {
	switch {
	case errors.Is(err, ErrHandshakeFailed): // before its cause's code: a fetch's deadline, a refused LoadPeers
		return codes.FailedPrecondition
	case errors.Is(err, ErrClosed), errors.Is(err, ErrRestarting), errors.Is(err, ErrConnecting),
		errors.Is(err, core.ErrNotAttached), errors.Is(err, core.ErrFenced),
		errors.Is(err, sdk.ErrPluginShutdown), errors.Is(err, sdk.ErrRemoteDisconnect):
		return codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, sdk.ErrTimeout):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled), errors.Is(err, sdk.ErrCanceled):
		return codes.Canceled
	case errors.Is(err, core.ErrUnknownOutcome):
		return codes.Unknown
	case errors.Is(err, ErrHostRestarted):
		return codes.Aborted
	case errors.Is(err, sdk.ErrBackend):
		return codes.Internal
	case errors.Is(err, sdk.ErrBusy), errors.Is(err, core.ErrHeld), errors.Is(err, ErrPoisoned):
		return codes.FailedPrecondition
	case errors.Is(err, sdk.ErrNotFound):
		return codes.NotFound
	case errors.Is(err, sdk.ErrUnsupported):
		return codes.Unimplemented
	case errors.Is(err, core.ErrDuplicate):
		return codes.AlreadyExists
	}
	return codes.InvalidArgument
}

// checkRequestID refuses an empty request id or one longer than
// maxRequestIDBytes: every finished report must fit a batch.
func checkRequestID(id string) error {
	if id == "" {
		return status.Error(codes.InvalidArgument, "request_id is empty")
	}
	if len(id) > maxRequestIDBytes {
		return status.Errorf(codes.InvalidArgument, "request_id of %d bytes: at most %d", len(id), maxRequestIDBytes)
	}
	return nil
}

func (s *engineServer) RegisterPool(ctx context.Context, r *enginev1.RegisterPoolRequest) (*enginev1.RegisterPoolResponse, error) {
	id, err := s.h.RegisterPool(ctx, r.GetName(), core.PoolSpec{Path: r.GetPath(), Offset: r.GetOffset(), BlockSize: r.GetBlockSize(), Blocks: r.GetBlocks()})
	return &enginev1.RegisterPoolResponse{Pool: uint32(id)}, engineErr(err)
}

func (s *engineServer) Alloc(ctx context.Context, r *enginev1.AllocRequest) (*enginev1.AllocResponse, error) {
	b, err := s.h.Alloc(ctx, core.PoolID(r.GetPool()), int(r.GetCount()))
	return &enginev1.AllocResponse{Blocks: b}, engineErr(err)
}

func (s *engineServer) Free(ctx context.Context, r *enginev1.FreeRequest) (*enginev1.Empty, error) {
	return &enginev1.Empty{}, engineErr(s.h.Free(ctx, core.PoolID(r.GetPool()), r.GetBlocks()))
}

func (s *engineServer) ConnectPeer(ctx context.Context, r *enginev1.ConnectPeerRequest) (*enginev1.Empty, error) {
	ranks := make([]RemoteRank, len(r.GetRanks()))
	for i, rk := range r.GetRanks() {
		ranks[i] = RemoteRank{Address: rk.GetAddress(), Pool: rk.GetPool()}
	}
	return &enginev1.Empty{}, engineErr(s.h.ConnectPeer(ctx, r.GetName(), ranks))
}

func (s *engineServer) RemovePeer(ctx context.Context, r *enginev1.RemovePeerRequest) (*enginev1.Empty, error) {
	return &enginev1.Empty{}, engineErr(s.h.RemovePeer(ctx, r.GetName()))
}

func parts(ps []*enginev1.Part) []core.Part {
	out := make([]core.Part, len(ps))
	for i, p := range ps {
		out[i] = core.Part{Pool: core.PoolID(p.GetPool()), Local: p.GetLocal(), Rank: int(p.GetRank()), Remote: p.GetRemote()}
	}
	return out
}

func (s *engineServer) Read(ctx context.Context, r *enginev1.ReadRequest) (*enginev1.Empty, error) {
	if err := checkRequestID(r.GetRequestId()); err != nil {
		return nil, err
	}
	return &enginev1.Empty{}, engineErr(s.h.Read(ctx, core.ReadSpec{
		Request: core.RequestID(r.GetRequestId()), Peer: r.GetPeer(), Parts: parts(r.GetParts()), NotifyProducer: r.GetNotifyProducer(),
		Token: core.Token(r.GetToken()),
	}))
}

func (s *engineServer) Write(ctx context.Context, r *enginev1.WriteRequest) (*enginev1.Empty, error) {
	if err := checkRequestID(r.GetRequestId()); err != nil {
		return nil, err
	}
	return &enginev1.Empty{}, engineErr(s.h.Write(ctx, core.WriteSpec{
		Request: core.RequestID(r.GetRequestId()), Peer: r.GetPeer(), Parts: parts(r.GetParts()),
		Consumers: int(r.GetConsumers()), Lease: time.Duration(r.GetLeaseMs()) * time.Millisecond,
		Token: core.Token(r.GetToken()),
	}))
}

func (s *engineServer) ExpectSend(ctx context.Context, r *enginev1.ExpectSendRequest) (*enginev1.Empty, error) {
	if err := checkRequestID(r.GetRequestId()); err != nil {
		return nil, err
	}
	return &enginev1.Empty{}, engineErr(s.h.ExpectSend(ctx, core.SendSpec{
		Request: core.RequestID(r.GetRequestId()), Peer: r.GetPeer(), Pool: core.PoolID(r.GetPool()), Blocks: r.GetBlocks(),
		Consumers: int(r.GetConsumers()), Lease: time.Duration(r.GetLeaseMs()) * time.Millisecond,
		Token: core.Token(r.GetToken()),
	}))
}

func (s *engineServer) ExpectReceive(ctx context.Context, r *enginev1.ExpectReceiveRequest) (*enginev1.Empty, error) {
	if err := checkRequestID(r.GetRequestId()); err != nil {
		return nil, err
	}
	return &enginev1.Empty{}, engineErr(s.h.ExpectReceive(ctx, core.RecvSpec{
		Request: core.RequestID(r.GetRequestId()), Peer: r.GetPeer(), Pool: core.PoolID(r.GetPool()), Blocks: r.GetBlocks(),
		Producers: int(r.GetProducers()), Lease: time.Duration(r.GetLeaseMs()) * time.Millisecond,
		Token: core.Token(r.GetToken()),
	}))
}

func blockRefs(bs []core.BlockRef) []*enginev1.BlockRef {
	out := make([]*enginev1.BlockRef, len(bs))
	for i, b := range bs {
		out[i] = &enginev1.BlockRef{Pool: uint32(b.Pool), Block: b.Block}
	}
	return out
}

func ids(rs []core.RequestID) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = string(r)
	}
	return out
}

// GetFinished takes the reports at the acknowledged cursor, at most one
// default-sized batch, and acknowledges them (the simple client's implicit
// acknowledgement). A failed receive is listed in finished_recving too, its
// blocks in invalid_blocks of the same reply (or, for a round too large for
// one reply, of a later part: more is set).
func (s *engineServer) GetFinished(ctx context.Context, _ *enginev1.GetFinishedRequest) (*enginev1.Finished, error) {
	if err := ctx.Err(); err != nil {
		return nil, engineErr(err)
	}
	return finishedProto(s.h.rep.take(DefaultBatchBytes)), nil
}

// finishedProto is a batch as the engine API sends it, following vLLM: a
// failed receive is listed in finished_recving too.
func finishedProto(b Batch) *enginev1.Finished {
	out := &enginev1.Finished{
		FinishedSending: ids(b.FinishedSending),
		FinishedRecving: ids(b.FinishedReceiving),
		InvalidBlocks:   blockRefs(b.InvalidBlocks),
		Quarantined:     blockRefs(b.Quarantined),
		Cursor:          b.Cursor,
		Next:            b.Next,
		More:            b.More,
		Incarnation:     b.Incarnation,
	}
	for i, fl := range b.Failed {
		out.Failed = append(out.Failed, &enginev1.Failure{RequestId: string(fl.Request), Sending: fl.Sending, Reason: b.Reasons[i]})
		if !fl.Sending {
			out.FinishedRecving = append(out.FinishedRecving, string(fl.Request))
		}
	}
	return out
}

func (s *engineServer) Status(ctx context.Context, _ *enginev1.StatusRequest) (*enginev1.StatusResponse, error) {
	st, err := s.h.Status(ctx)
	if err != nil {
		return nil, engineErr(err)
	}
	resp := &enginev1.StatusResponse{
		Name: st.Name, Transport: st.Transport, Epoch: st.Epoch,
		InFlight: uint64(st.Stats.Live), Retained: uint64(st.Stats.Retained), Retired: uint64(st.Stats.RetiredPeers),
		QuarantinedBlocks: uint64(st.Stats.Quarantined), Peers: st.Peers,
		Fences: st.Fences, TransportRestarts: st.Restarts,
		NativeRegions: st.Native.Regions, NativePeers: st.Native.Peers, NativeDlists: st.Native.Dlists, NativeHandles: st.Native.Handles,
		Journal: uint64(st.Stats.Journal), Requests: uint64(st.Stats.Requests), TransportPid: int64(st.TransportPid),
		Incarnation: st.Incarnation, EngineConnectionsRefused: st.EngineRefused,
	}
	if g := st.Group; g != nil {
		resp.PoisonedPools, resp.UnionFailed, resp.GroupHeld = g.Poisoned, g.UnionFailed, g.Held
		resp.GroupWrites, resp.GroupReads, resp.GroupExpired = g.Writes, g.Reads, g.Expired
	}
	return resp, nil
}
