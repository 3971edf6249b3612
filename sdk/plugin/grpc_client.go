package plugin

import (
	"context"
	"os"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/custody-dev/custody/sdk"
	pb "github.com/custody-dev/custody/sdk/plugin/proto/custody/transport/v1"
)

// grpcClient is the host's side of a transport plugin: it satisfies
// Transport and EventSource over gRPC.
//
// Every call runs under a deadline (the caller's or the call timeout,
// whichever comes first) and is tied to done, the context go-plugin cancels
// when the plugin process exits: once the process is gone, every pending
// and every later call returns CodePluginShutdown (Vault dbplugin v5's
// idiom). Errors the transport returned come back as the same *Error.
type grpcClient struct {
	rpc     pb.TransportClient
	done    context.Context
	timeout time.Duration
	// name says which transport, in every error this client makes up.
	name string
	// exited says how the process ended, once it did (Plugin.ExitState);
	// nil in tests without a process.
	exited func() *os.ProcessState
}

var (
	_ sdk.Transport   = (*grpcClient)(nil)
	_ sdk.EventSource = (*grpcClient)(nil)
)

// call runs one RPC under the call's deadline and the process's lifetime.
func (c *grpcClient) call(ctx context.Context, method string, rpc func(context.Context) error) error {
	if c.done.Err() != nil {
		return c.shutdown(method)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	stop := context.AfterFunc(c.done, cancel)
	defer stop()
	err := rpc(ctx)
	if err == nil {
		return nil
	}
	return c.callError(ctx, method, err)
}

// callError turns the error of one RPC into the contract's error.
func (c *grpcClient) callError(ctx context.Context, method string, err error) error {
	st := status.Convert(err)
	if terr := transportError(st); terr != nil {
		if sdk.CodeOf(terr) == sdk.CodePluginShutdown && c.done.Err() == nil {
			// Only the host can know the process is gone; a live transport
			// claiming it would make the host treat its transfers as fenced.
			return sdk.Errorf(sdk.CodeBackend, "%s: %s is alive but answered %v; treating it as a backend failure", method, c.name, terr)
		}
		return terr
	}
	if c.done.Err() != nil {
		return c.shutdown(method)
	}
	switch code := st.Code(); {
	case code == codes.Unavailable, code == codes.Canceled && ctx.Err() == nil:
		// The connection broke, or was closed under the call (Stop). That
		// is the process ending far more often than not, and go-plugin
		// notices the exit a moment after the socket does: wait for it,
		// within the call's deadline.
		select {
		case <-c.done.Done():
			return c.shutdown(method)
		case <-ctx.Done():
		}
		return sdk.Errorf(sdk.CodeTimeout, "%s: %s unreachable (%s) and still running after the call's deadline; whether the call took effect is unknown: poll or count resources to find out",
			method, c.name, st.Message())
	case code == codes.DeadlineExceeded, code == codes.Canceled:
		return sdk.Errorf(sdk.CodeTimeout, "%s: %s did not answer before the call's deadline (%s, at most %s) or the caller canceled it; whether the call took effect is unknown: poll or count resources to find out",
			method, c.name, st.Message(), c.timeout)
	case code == codes.Unimplemented:
		return sdk.Errorf(sdk.CodeUnsupported, "%s: %s does not implement it: %s", method, c.name, st.Message())
	}
	return sdk.Errorf(sdk.CodeBackend, "%s: %s failed outside the contract (gRPC %s: %s)", method, c.name, st.Code(), st.Message())
}

// shutdown is the error of a call made once the process is gone.
func (c *grpcClient) shutdown(method string) error { return c.fenced(method, nil) }

// fenced is the error of a call made once the process is gone, fenced for
// the ring protocol violation fence when that is not nil.
func (c *grpcClient) fenced(method string, fence error) error {
	x := &ExitError{Method: method, Transport: c.name, Fence: fence}
	if c.exited != nil {
		x.State = c.exited()
	}
	return x
}

// count checks that a batched call answered once per item; a transport that
// does not breaks the contract, and its answer cannot be matched to items.
func (c *grpcClient) count(method string, got, want int) error {
	if got == want {
		return nil
	}
	return sdk.Errorf(sdk.CodeBackend, "%s: %s answered %d items for %d; contract violation, results dropped", method, c.name, got, want)
}

// Describe is Transport.Describe, across the process boundary.
func (c *grpcClient) Describe(ctx context.Context) (sdk.Description, error) {
	var d sdk.Description
	err := c.call(ctx, "Describe", func(ctx context.Context) error {
		r, err := c.rpc.Describe(ctx, &pb.DescribeRequest{})
		if err == nil {
			d = descriptionFrom(r)
		}
		return err
	})
	return d, err
}

// Open is Transport.Open, across the process boundary.
func (c *grpcClient) Open(ctx context.Context, req sdk.OpenRequest) error {
	return c.call(ctx, "Open", func(ctx context.Context) error {
		_, err := c.rpc.Open(ctx, openRequestOf(req))
		return err
	})
}

// Close is Transport.Close, across the process boundary.
func (c *grpcClient) Close(ctx context.Context) error {
	return c.call(ctx, "Close", func(ctx context.Context) error {
		_, err := c.rpc.Close(ctx, &pb.Empty{})
		return err
	})
}

// RegisterMemory is Transport.RegisterMemory, across the process boundary.
func (c *grpcClient) RegisterMemory(ctx context.Context, regions []sdk.Region) ([]sdk.Registration, error) {
	var items []*pb.IDResult
	err := c.call(ctx, "RegisterMemory", func(ctx context.Context) error {
		r, err := c.rpc.RegisterMemory(ctx, regionsOf(regions))
		items = r.GetItems()
		return err
	})
	if err == nil {
		err = c.count("RegisterMemory", len(items), len(regions))
	}
	if err != nil {
		return nil, err
	}
	return registrationsFrom(items), nil
}

// DeregisterMemory is Transport.DeregisterMemory, across the process boundary.
func (c *grpcClient) DeregisterMemory(ctx context.Context, ids []sdk.RegionID) ([]error, error) {
	return c.statuses(ctx, "DeregisterMemory", len(ids), func(ctx context.Context) (*pb.Statuses, error) {
		return c.rpc.DeregisterMemory(ctx, idsOf(ids))
	})
}

// LocalMetadata is Transport.LocalMetadata, across the process boundary.
func (c *grpcClient) LocalMetadata(ctx context.Context) ([]byte, error) {
	var md []byte
	err := c.call(ctx, "LocalMetadata", func(ctx context.Context) error {
		r, err := c.rpc.LocalMetadata(ctx, &pb.Empty{})
		md = r.GetMetadata()
		return err
	})
	if err != nil {
		return nil, err
	}
	return md, nil
}

// LoadPeers is Transport.LoadPeers, across the process boundary.
func (c *grpcClient) LoadPeers(ctx context.Context, peers []sdk.PeerSpec) ([]sdk.PeerResult, error) {
	var items []*pb.IDResult
	err := c.call(ctx, "LoadPeers", func(ctx context.Context) error {
		r, err := c.rpc.LoadPeers(ctx, peerSpecsOf(peers))
		items = r.GetItems()
		return err
	})
	if err == nil {
		err = c.count("LoadPeers", len(items), len(peers))
	}
	if err != nil {
		return nil, err
	}
	return peerResultsFrom(items), nil
}

// UnloadPeers is Transport.UnloadPeers, across the process boundary.
func (c *grpcClient) UnloadPeers(ctx context.Context, ids []sdk.PeerID) ([]error, error) {
	return c.statuses(ctx, "UnloadPeers", len(ids), func(ctx context.Context) (*pb.Statuses, error) {
		return c.rpc.UnloadPeers(ctx, idsOf(ids))
	})
}

// PrepareDescriptors is Transport.PrepareDescriptors, across the process boundary.
func (c *grpcClient) PrepareDescriptors(ctx context.Context, lists []sdk.DlistSpec) ([]sdk.DlistResult, error) {
	var items []*pb.IDResult
	err := c.call(ctx, "PrepareDescriptors", func(ctx context.Context) error {
		r, err := c.rpc.PrepareDescriptors(ctx, dlistSpecsOf(lists))
		items = r.GetItems()
		return err
	})
	if err == nil {
		err = c.count("PrepareDescriptors", len(items), len(lists))
	}
	if err != nil {
		return nil, err
	}
	return dlistResultsFrom(items), nil
}

// ReleaseDescriptors is Transport.ReleaseDescriptors, across the process boundary.
func (c *grpcClient) ReleaseDescriptors(ctx context.Context, ids []sdk.DlistID) ([]error, error) {
	return c.statuses(ctx, "ReleaseDescriptors", len(ids), func(ctx context.Context) (*pb.Statuses, error) {
		return c.rpc.ReleaseDescriptors(ctx, idsOf(ids))
	})
}

// Post is Transport.Post, across the process boundary.
func (c *grpcClient) Post(ctx context.Context, posts []sdk.PostSpec) ([]sdk.PostResult, error) {
	var items []*pb.IDResult
	err := c.call(ctx, "Post", func(ctx context.Context) error {
		r, err := c.rpc.Post(ctx, postSpecsOf(posts))
		items = r.GetItems()
		return err
	})
	if err == nil {
		err = c.count("Post", len(items), len(posts))
	}
	if err != nil {
		return nil, err
	}
	return postResultsFrom(items), nil
}

// Poll is Transport.Poll, across the process boundary.
func (c *grpcClient) Poll(ctx context.Context, ids []sdk.HandleID) ([]sdk.HandleStatus, error) {
	var items []*pb.HandleStatus
	err := c.call(ctx, "Poll", func(ctx context.Context) error {
		r, err := c.rpc.Poll(ctx, idsOf(ids))
		items = r.GetItems()
		return err
	})
	if err == nil {
		err = c.count("Poll", len(items), len(ids))
	}
	if err != nil {
		return nil, err
	}
	return handleStatusesFrom(items), nil
}

// Cancel is Transport.Cancel, across the process boundary.
func (c *grpcClient) Cancel(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	return c.statuses(ctx, "Cancel", len(ids), func(ctx context.Context) (*pb.Statuses, error) {
		return c.rpc.Cancel(ctx, idsOf(ids))
	})
}

// Release is Transport.Release, across the process boundary.
func (c *grpcClient) Release(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	return c.statuses(ctx, "Release", len(ids), func(ctx context.Context) (*pb.Statuses, error) {
		return c.rpc.Release(ctx, idsOf(ids))
	})
}

// SendNotifications is Transport.SendNotifications, across the process boundary.
func (c *grpcClient) SendNotifications(ctx context.Context, msgs []sdk.OutboundNotification) ([]error, error) {
	return c.statuses(ctx, "SendNotifications", len(msgs), func(ctx context.Context) (*pb.Statuses, error) {
		return c.rpc.SendNotifications(ctx, outboundOf(msgs))
	})
}

// Notifications is Transport.Notifications, across the process boundary.
func (c *grpcClient) Notifications(ctx context.Context, max int) ([]sdk.Notification, error) {
	var ns []sdk.Notification
	err := c.call(ctx, "Notifications", func(ctx context.Context) error {
		r, err := c.rpc.Notifications(ctx, &pb.Max{Max: int64(max)})
		ns = notificationsFrom(r)
		return err
	})
	if err != nil {
		return nil, err
	}
	return ns, nil
}

// Resources is Transport.Resources, across the process boundary.
func (c *grpcClient) Resources(ctx context.Context) (sdk.Resources, error) {
	var res sdk.Resources
	err := c.call(ctx, "Resources", func(ctx context.Context) error {
		r, err := c.rpc.Resources(ctx, &pb.Empty{})
		res = resourcesFrom(r)
		return err
	})
	if err != nil {
		return sdk.Resources{}, err
	}
	return res, nil
}

// Events returns CodeUnsupported when the transport is no EventSource.
func (c *grpcClient) Events(ctx context.Context, max int) ([]sdk.Event, error) {
	var evs []sdk.Event
	err := c.call(ctx, "Events", func(ctx context.Context) error {
		r, err := c.rpc.Events(ctx, &pb.Max{Max: int64(max)})
		evs = eventsFrom(r)
		return err
	})
	if err != nil {
		return nil, err
	}
	return evs, nil
}

// statuses runs a batched call that answers one error per item.
func (c *grpcClient) statuses(ctx context.Context, method string, n int, rpc func(context.Context) (*pb.Statuses, error)) ([]error, error) {
	var items *pb.Statuses
	err := c.call(ctx, method, func(ctx context.Context) error {
		r, err := rpc(ctx)
		items = r
		return err
	})
	if err == nil {
		err = c.count(method, len(items.GetItems()), n)
	}
	if err != nil {
		return nil, err
	}
	return errsOf(items), nil
}
