package plugin

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/custody-dev/custody/sdk"
	pb "github.com/custody-dev/custody/sdk/plugin/proto/custody/transport/v1"
)

// stubTransport and the in-memory connection the tests of convert_test.go
// run the gRPC server and client over.

// stubTransport answers every call with callErr when set, and otherwise
// with one result per item: the first item OK, the others itemErr.
type stubTransport struct {
	callErr error
	itemErr error
	// short makes batched calls answer one item fewer than asked.
	short bool
	// block makes every call wait until its context ends.
	block bool
	// entered and left, when set, receive a value as a blocking call
	// starts and stops waiting (when the channel has room).
	entered, left chan struct{}
}

func (s *stubTransport) n(k int) int {
	if s.short && k > 0 {
		return k - 1
	}
	return k
}

func (s *stubTransport) item(i int) error {
	if i == 0 {
		return nil
	}
	return s.itemErr
}

func (s *stubTransport) wait(ctx context.Context) error {
	if s.block {
		select {
		case s.entered <- struct{}{}:
		default:
		}
		<-ctx.Done()
		select {
		case s.left <- struct{}{}:
		default:
		}
		return sdk.Errorf(sdk.CodeTimeout, "stub: %v", ctx.Err())
	}
	return s.callErr
}

func (s *stubTransport) errs(ctx context.Context, k int) ([]error, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	out := make([]error, s.n(k))
	for i := range out {
		out[i] = s.item(i)
	}
	return out, nil
}

func (s *stubTransport) Describe(ctx context.Context) (sdk.Description, error) {
	if err := s.wait(ctx); err != nil {
		return sdk.Description{}, err
	}
	return testDescription, nil
}

func (s *stubTransport) Open(ctx context.Context, req sdk.OpenRequest) error { return s.wait(ctx) }
func (s *stubTransport) Close(ctx context.Context) error                     { return s.wait(ctx) }

func (s *stubTransport) RegisterMemory(ctx context.Context, regions []sdk.Region) ([]sdk.Registration, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	out := make([]sdk.Registration, s.n(len(regions)))
	for i := range out {
		out[i] = sdk.Registration{ID: sdk.RegionID(i + 1), Err: s.item(i)}
	}
	return out, nil
}

func (s *stubTransport) DeregisterMemory(ctx context.Context, ids []sdk.RegionID) ([]error, error) {
	return s.errs(ctx, len(ids))
}

func (s *stubTransport) LocalMetadata(ctx context.Context) ([]byte, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return []byte("metadata"), nil
}

func (s *stubTransport) LoadPeers(ctx context.Context, peers []sdk.PeerSpec) ([]sdk.PeerResult, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	out := make([]sdk.PeerResult, s.n(len(peers)))
	for i := range out {
		out[i] = sdk.PeerResult{ID: sdk.PeerID(i + 1), Err: s.item(i)}
	}
	return out, nil
}

func (s *stubTransport) UnloadPeers(ctx context.Context, ids []sdk.PeerID) ([]error, error) {
	return s.errs(ctx, len(ids))
}

func (s *stubTransport) PrepareDescriptors(ctx context.Context, lists []sdk.DlistSpec) ([]sdk.DlistResult, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	out := make([]sdk.DlistResult, s.n(len(lists)))
	for i := range out {
		out[i] = sdk.DlistResult{ID: sdk.DlistID(i + 1), Err: s.item(i)}
	}
	return out, nil
}

func (s *stubTransport) ReleaseDescriptors(ctx context.Context, ids []sdk.DlistID) ([]error, error) {
	return s.errs(ctx, len(ids))
}

func (s *stubTransport) Post(ctx context.Context, posts []sdk.PostSpec) ([]sdk.PostResult, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	out := make([]sdk.PostResult, s.n(len(posts)))
	for i := range out {
		out[i] = sdk.PostResult{ID: sdk.HandleID(i + 1), Err: s.item(i)}
	}
	return out, nil
}

// Poll answers DONE for the first item, FAILED with itemErr as the reason
// for the second, and itemErr as the poll's own error for the others.
func (s *stubTransport) Poll(ctx context.Context, ids []sdk.HandleID) ([]sdk.HandleStatus, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	out := make([]sdk.HandleStatus, s.n(len(ids)))
	for i := range out {
		switch i {
		case 0:
			out[i] = sdk.HandleStatus{State: sdk.StateDone}
		case 1:
			out[i] = sdk.HandleStatus{State: sdk.StateFailed, Reason: s.itemErr}
		default:
			out[i] = sdk.HandleStatus{Err: s.itemErr}
		}
	}
	return out, nil
}

func (s *stubTransport) Cancel(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	return s.errs(ctx, len(ids))
}

func (s *stubTransport) Release(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	return s.errs(ctx, len(ids))
}

func (s *stubTransport) SendNotifications(ctx context.Context, msgs []sdk.OutboundNotification) ([]error, error) {
	return s.errs(ctx, len(msgs))
}

func (s *stubTransport) Notifications(ctx context.Context, max int) ([]sdk.Notification, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return []sdk.Notification{{From: "peer", Message: []byte(fmt.Sprint(max))}}, nil
}

func (s *stubTransport) Resources(ctx context.Context) (sdk.Resources, error) {
	if err := s.wait(ctx); err != nil {
		return sdk.Resources{}, err
	}
	return sdk.Resources{Regions: 1, Peers: 2, Dlists: 3, Handles: 4, InFlight: 5}, nil
}

// eventStub is a stubTransport that is also an EventSource.
type eventStub struct{ *stubTransport }

func (s eventStub) Events(ctx context.Context, max int) ([]sdk.Event, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return []sdk.Event{{Handle: 1, State: sdk.StateDone}, {Handle: 2, State: sdk.StateFailed, Reason: s.itemErr}}, nil
}

var testDescription = sdk.Description{
	Name:          "stub",
	Version:       "0.1",
	ContractMajor: sdk.ContractMajor,
	ContractMinor: sdk.ContractMinor,
	MemoryKinds:   []sdk.MemoryKind{sdk.MemoryHost},
	Capabilities:  sdk.Capabilities{Remote: true, Local: true, Notifications: true, Cancel: true, Events: true},
	CancelEffect:  sdk.CancelClosesPeer,
	PeerLoss:      sdk.PeerLossProcessExits,
	FenceScope:    sdk.FenceInitiatedAndIncoming,
	Limits: sdk.Limits{
		MaxDescriptorsPerList: 1, MaxDescriptorsPerPost: 2, MaxItemsPerCall: 3, MaxNotificationBytes: 4,
		MaxMetadataBytes: 5, MaxTransferBytes: 6, PeerLossBoundMillis: 7, CancelBoundMillis: 8,
	},
}

// connect serves impl over an in-memory gRPC connection and returns the
// client for it, tied to done, with the given call timeout.
func connect(t *testing.T, impl sdk.Transport, done context.Context, timeout time.Duration) *grpcClient {
	t.Helper()
	c, _, _ := connectServer(t, impl, done, timeout)
	return c
}

// connectServer is connect that also returns the server and the client's
// connection.
func connectServer(t *testing.T, impl sdk.Transport, done context.Context, timeout time.Duration) (*grpcClient, *grpc.Server, *grpc.ClientConn) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	pb.RegisterTransportServer(srv, &grpcServer{impl: impl})
	go func() { _ = srv.Serve(lis) }()
	cc, err := grpc.NewClient("passthrough:///stub",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cc.Close()
		srv.Stop()
	})
	return &grpcClient{rpc: pb.NewTransportClient(cc), done: done, timeout: timeout, name: "stub"}, srv, cc
}
