package plugin

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
	pb "github.com/custody-dev/custody/sdk/plugin/proto/custody/transport/v1"
)

// These tests run the gRPC server and client of this package against each
// other over an in-memory connection, without go-plugin, so that every
// conversion is checked for every call and every code. The tests in
// launch_test.go do the same through real plugin processes.

// callAll makes every call of the contract once, with two items for each
// batched call, and returns each call's error by name.
func callAll(ctx context.Context, c *grpcClient) map[string]error {
	two := []sdk.HandleID{1, 2}
	out := map[string]error{}
	_, out["Describe"] = c.Describe(ctx)
	out["Open"] = c.Open(ctx, sdk.OpenRequest{Agent: "a"})
	out["Close"] = c.Close(ctx)
	_, out["RegisterMemory"] = c.RegisterMemory(ctx, make([]sdk.Region, 2))
	_, out["DeregisterMemory"] = c.DeregisterMemory(ctx, []sdk.RegionID{1, 2})
	_, out["LocalMetadata"] = c.LocalMetadata(ctx)
	_, out["LoadPeers"] = c.LoadPeers(ctx, make([]sdk.PeerSpec, 2))
	_, out["UnloadPeers"] = c.UnloadPeers(ctx, []sdk.PeerID{1, 2})
	_, out["PrepareDescriptors"] = c.PrepareDescriptors(ctx, make([]sdk.DlistSpec, 2))
	_, out["ReleaseDescriptors"] = c.ReleaseDescriptors(ctx, []sdk.DlistID{1, 2})
	_, out["Post"] = c.Post(ctx, make([]sdk.PostSpec, 2))
	_, out["Poll"] = c.Poll(ctx, two)
	_, out["Cancel"] = c.Cancel(ctx, two)
	_, out["Release"] = c.Release(ctx, two)
	_, out["SendNotifications"] = c.SendNotifications(ctx, make([]sdk.OutboundNotification, 2))
	_, out["Notifications"] = c.Notifications(ctx, 0)
	_, out["Resources"] = c.Resources(ctx)
	_, out["Events"] = c.Events(ctx, 0)
	return out
}

// crossing is an error a transport returns and the *Error the host must see
// for it after the crossing.
type crossing struct {
	name string
	sent error
	want *sdk.Error
}

// everyError is every code, and the odd errors a transport may return.
var everyError = func() []crossing {
	var out []crossing
	for c := sdk.CodeBusy; c <= sdk.CodePluginShutdown; c++ {
		msg := fmt.Sprintf("id %d: what to do about %s", c, c)
		out = append(out, crossing{c.String(), &sdk.Error{Code: c, Message: msg}, &sdk.Error{Code: c, Message: msg}})
	}
	return append(out,
		crossing{"empty message", &sdk.Error{Code: sdk.CodeBusy}, &sdk.Error{Code: sdk.CodeBusy}},
		crossing{"wrapped", fmt.Errorf("release handle 7: %w", sdk.ErrBusy), &sdk.Error{Code: sdk.CodeBusy, Message: "release handle 7: BUSY"}},
		crossing{"not an sdk error", errors.New("disk on fire"), &sdk.Error{Code: sdk.CodeBackend, Message: "disk on fire"}},
		crossing{"code unknown to this version", &sdk.Error{Code: 42, Message: "future"}, &sdk.Error{Code: 42, Message: "future"}},
		crossing{"error with code OK", &sdk.Error{Code: sdk.CodeOK, Message: "odd"}, &sdk.Error{Code: sdk.CodeBackend, Message: "transport returned an error with code OK: odd"}},
	)
}()

func TestCallErrorsCrossUnchanged(t *testing.T) {
	for _, tc := range everyError {
		t.Run(tc.name, func(t *testing.T) {
			c := connect(t, eventStub{&stubTransport{callErr: tc.sent}}, context.Background(), time.Minute)
			for call, err := range callAll(context.Background(), c) {
				require.Error(t, err, call)
				if tc.want.Code == sdk.CodePluginShutdown {
					// Only the host knows the process is gone: a live
					// transport saying so is a backend failure.
					assert.Equal(t, sdk.CodeBackend, sdk.CodeOf(err), call)
					assert.Contains(t, err.Error(), "alive", call)
					continue
				}
				assert.Equal(t, tc.want, err, call)
				assert.ErrorIs(t, err, &sdk.Error{Code: tc.want.Code}, call)
			}
		})
	}
}

func TestItemErrorsCrossUnchanged(t *testing.T) {
	ctx := context.Background()
	for _, tc := range everyError {
		t.Run(tc.name, func(t *testing.T) {
			c := connect(t, eventStub{&stubTransport{itemErr: tc.sent}}, ctx, time.Minute)
			var want error = tc.want
			batches := map[string]func() ([]error, error){
				"DeregisterMemory":   func() ([]error, error) { return c.DeregisterMemory(ctx, []sdk.RegionID{1, 2}) },
				"UnloadPeers":        func() ([]error, error) { return c.UnloadPeers(ctx, []sdk.PeerID{1, 2}) },
				"ReleaseDescriptors": func() ([]error, error) { return c.ReleaseDescriptors(ctx, []sdk.DlistID{1, 2}) },
				"Cancel":             func() ([]error, error) { return c.Cancel(ctx, []sdk.HandleID{1, 2}) },
				"Release":            func() ([]error, error) { return c.Release(ctx, []sdk.HandleID{1, 2}) },
				"SendNotifications": func() ([]error, error) {
					return c.SendNotifications(ctx, make([]sdk.OutboundNotification, 2))
				},
				"RegisterMemory": func() ([]error, error) {
					r, err := c.RegisterMemory(ctx, make([]sdk.Region, 2))
					return mapSlice(r, func(x sdk.Registration) error { return x.Err }), err
				},
				"LoadPeers": func() ([]error, error) {
					r, err := c.LoadPeers(ctx, make([]sdk.PeerSpec, 2))
					return mapSlice(r, func(x sdk.PeerResult) error { return x.Err }), err
				},
				"PrepareDescriptors": func() ([]error, error) {
					r, err := c.PrepareDescriptors(ctx, make([]sdk.DlistSpec, 2))
					return mapSlice(r, func(x sdk.DlistResult) error { return x.Err }), err
				},
				"Post": func() ([]error, error) {
					r, err := c.Post(ctx, make([]sdk.PostSpec, 2))
					return mapSlice(r, func(x sdk.PostResult) error { return x.Err }), err
				},
			}
			for call, f := range batches {
				errs, err := f()
				require.NoError(t, err, call)
				assert.Equal(t, []error{nil, want}, errs, call)
			}

			sts, err := c.Poll(ctx, []sdk.HandleID{1, 2, 3})
			require.NoError(t, err)
			assert.Equal(t, []sdk.HandleStatus{
				{State: sdk.StateDone},
				{State: sdk.StateFailed, Reason: want},
				{Err: want},
			}, sts)

			evs, err := c.Events(ctx, 0)
			require.NoError(t, err)
			assert.Equal(t, []sdk.Event{{Handle: 1, State: sdk.StateDone}, {Handle: 2, State: sdk.StateFailed, Reason: want}}, evs)
		})
	}
}

func mapSlice[T any](in []T, f func(T) error) []error {
	if in == nil {
		return nil
	}
	out := make([]error, len(in))
	for i, x := range in {
		out[i] = f(x)
	}
	return out
}

func TestValuesCrossUnchanged(t *testing.T) {
	ctx := context.Background()
	c := connect(t, eventStub{&stubTransport{}}, ctx, time.Minute)

	d, err := c.Describe(ctx)
	require.NoError(t, err)
	assert.Equal(t, testDescription, d)

	regs, err := c.RegisterMemory(ctx, make([]sdk.Region, 3))
	require.NoError(t, err)
	assert.Equal(t, []sdk.Registration{{ID: 1}, {ID: 2}, {ID: 3}}, regs)

	md, err := c.LocalMetadata(ctx)
	require.NoError(t, err)
	assert.Equal(t, []byte("metadata"), md)

	ns, err := c.Notifications(ctx, 7)
	require.NoError(t, err)
	assert.Equal(t, []sdk.Notification{{From: "peer", Message: []byte("7")}}, ns)

	r, err := c.Resources(ctx)
	require.NoError(t, err)
	assert.Equal(t, sdk.Resources{Regions: 1, Peers: 2, Dlists: 3, Handles: 4, InFlight: 5}, r)

	empty, err := c.Release(ctx, nil)
	require.NoError(t, err)
	assert.Empty(t, empty)
}

// TestRequestsCrossUnchanged checks the request side of the conversion: what
// the host sends is what the transport receives.
func TestRequestsCrossUnchanged(t *testing.T) {
	open := sdk.OpenRequest{Agent: "a", Params: map[string]string{"seed": "3", "fault": "stall"}}
	assert.Equal(t, open, openRequestFrom(openRequestOf(open)))

	regions := []sdk.Region{{Path: "/dev/shm/x", Offset: 4096, Length: 1 << 20, Kind: sdk.MemoryHost}, {}}
	assert.Equal(t, regions, regionsFrom(regionsOf(regions)))

	peers := []sdk.PeerSpec{{Name: "b", Metadata: []byte{1, 2, 3}}, {Name: "c"}}
	assert.Equal(t, peers, peerSpecsFrom(peerSpecsOf(peers)))

	lists := []sdk.DlistSpec{{Descriptors: []sdk.Descriptor{{Region: 1, Offset: 2, Length: 3}}}, {Peer: 9, Descriptors: []sdk.Descriptor{{Region: 4, Offset: 5, Length: 6}, {Region: 7}}}}
	assert.Equal(t, lists, dlistSpecsFrom(dlistSpecsOf(lists)))

	posts := []sdk.PostSpec{{Op: sdk.OpWrite, Local: 1, LocalIndices: []uint32{0, 2}, Remote: 3, RemoteIndices: []uint32{1, 4}, Notification: []byte("done")}, {Op: sdk.OpRead, Local: 5, Remote: 6}}
	assert.Equal(t, posts, postSpecsFrom(postSpecsOf(posts)))

	msgs := []sdk.OutboundNotification{{Peer: 2, Message: []byte("hi")}}
	assert.Equal(t, msgs, outboundFrom(outboundOf(msgs)))

	assert.Equal(t, []sdk.HandleID{1, 1 << 63}, idsFrom[sdk.HandleID](idsOf([]sdk.HandleID{1, 1 << 63})))
}

func TestOutOfRangeValuesStayInvalid(t *testing.T) {
	// A state or op that does not fit in a byte must not wrap into a valid
	// one: an unknown state is never terminal.
	assert.False(t, stateFrom(uint32(sdk.StateDone)+256).Terminal())
	posts := postSpecsFrom(&pb.PostRequest{Posts: []*pb.PostSpec{{Op: uint32(sdk.OpWrite) + 256}}})
	assert.False(t, posts[0].Op.Valid())
	err := errOf(&pb.Status{Code: uint32(sdk.CodeBusy) + 256, Message: "m"})
	assert.Equal(t, sdk.CodeBackend, sdk.CodeOf(err))
	assert.NotErrorIs(t, err, sdk.ErrBusy)
}

func TestShortAnswerIsRefused(t *testing.T) {
	c := connect(t, eventStub{&stubTransport{short: true}}, context.Background(), time.Minute)
	for call, err := range callAll(context.Background(), c) {
		switch call {
		case "Describe", "Open", "Close", "LocalMetadata", "Notifications", "Resources", "Events":
			assert.NoError(t, err, call)
		default:
			assert.ErrorIs(t, err, sdk.ErrBackend, call)
			assert.ErrorContains(t, err, "answered 1 items for 2", call)
		}
	}
}

func TestEventsUnimplementedIsUnsupported(t *testing.T) {
	c := connect(t, &stubTransport{}, context.Background(), time.Minute)
	evs, err := c.Events(context.Background(), 0)
	assert.Nil(t, evs)
	assert.ErrorIs(t, err, sdk.ErrUnsupported)
}

func TestCallTimeoutIsTimeout(t *testing.T) {
	c := connect(t, eventStub{&stubTransport{block: true}}, context.Background(), 20*time.Millisecond)
	for call, err := range callAll(context.Background(), c) {
		assert.ErrorIs(t, err, sdk.ErrTimeout, call)
	}
}

func TestCallerCancelIsTimeout(t *testing.T) {
	c := connect(t, eventStub{&stubTransport{block: true}}, context.Background(), time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for call, err := range callAll(ctx, c) {
		assert.ErrorIs(t, err, sdk.ErrTimeout, call)
	}
}

func TestProcessGoneIsPluginShutdown(t *testing.T) {
	t.Run("pending call", func(t *testing.T) {
		done, exit := context.WithCancel(context.Background())
		stub := &stubTransport{block: true, entered: make(chan struct{}, 1)}
		c := connect(t, eventStub{stub}, done, time.Hour)
		errs := make(chan error)
		go func() {
			_, err := c.Poll(context.Background(), []sdk.HandleID{1})
			errs <- err
		}()
		<-stub.entered
		exit()
		assert.ErrorIs(t, <-errs, sdk.ErrPluginShutdown)
	})
	t.Run("connection closed under a pending call, then the exit", func(t *testing.T) {
		// go-plugin closes its connection while the process may still be
		// exiting; the call must wait for the exit, not guess.
		done, exit := context.WithCancel(context.Background())
		stub := &stubTransport{block: true, entered: make(chan struct{}, 1), left: make(chan struct{}, 1)}
		c, _, cc := connectServer(t, eventStub{stub}, done, time.Hour)
		errs := make(chan error)
		go func() {
			_, err := c.Poll(context.Background(), []sdk.HandleID{1})
			errs <- err
		}()
		<-stub.entered
		require.NoError(t, cc.Close())
		<-stub.left
		exit()
		assert.ErrorIs(t, <-errs, sdk.ErrPluginShutdown)
	})
	t.Run("later calls", func(t *testing.T) {
		done, exit := context.WithCancel(context.Background())
		exit()
		c := connect(t, eventStub{&stubTransport{}}, done, time.Hour)
		for call, err := range callAll(context.Background(), c) {
			assert.ErrorIs(t, err, sdk.ErrPluginShutdown, call)
		}
	})
}

// TestLostConnectionWhileAliveIsTimeout: a connection that breaks while the
// process still runs is not a shutdown; the effect of the call is unknown.
func TestLostConnectionWhileAliveIsTimeout(t *testing.T) {
	c, srv, _ := connectServer(t, eventStub{&stubTransport{}}, context.Background(), time.Second)
	_, err := c.Resources(context.Background())
	require.NoError(t, err)
	srv.Stop()
	_, err = c.Resources(context.Background())
	assert.ErrorIs(t, err, sdk.ErrTimeout)
	assert.ErrorContains(t, err, "unreachable")
}
