package ring

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/custody-dev/custody/sdk"
)

// The host's side of a pair as package plugin's Plugin drives it, with
// stand-ins for what the Client needs of package plugin.

// exitError stands for package plugin's ExitError: the error of a call
// once the process is gone, PLUGIN_SHUTDOWN, saying how it ended and, when
// the rings fenced it, why.
func exitError(method string, fence error) error {
	how := "exited"
	if fence != nil {
		how = fmt.Sprintf("was fenced (killed by the host, exited) because its rings broke the protocol: %v", fence)
	}
	return sdk.Errorf(sdk.CodePluginShutdown, "%s: test transport %s; launch it again under a new epoch", method, how)
}

// nopLog drops what the rings log.
type nopLog struct{}

func (nopLog) Error(string, ...any) {}

// grpcCalls stands for the host's gRPC client: the calls a Client hands
// over for what the rings cannot carry.
type grpcCalls interface {
	Post(context.Context, []sdk.PostSpec) ([]sdk.PostResult, error)
	Poll(context.Context, []sdk.HandleID) ([]sdk.HandleStatus, error)
	Cancel(context.Context, []sdk.HandleID) ([]error, error)
	Release(context.Context, []sdk.HandleID) ([]error, error)
	SendNotifications(context.Context, []sdk.OutboundNotification) ([]error, error)
}

// hostCalls makes the contract's calls as package plugin's Plugin does
// while the rings are attached: through the Client, with rpc standing for
// gRPC.
type hostCalls struct {
	r   *Client
	rpc grpcCalls
}

func (h hostCalls) Post(ctx context.Context, posts []sdk.PostSpec) ([]sdk.PostResult, error) {
	return h.r.Post(ctx, posts, h.rpc.Post)
}

func (h hostCalls) Poll(ctx context.Context, ids []sdk.HandleID) ([]sdk.HandleStatus, error) {
	return h.r.Poll(ctx, ids, h.rpc.Poll)
}

func (h hostCalls) Cancel(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	return h.r.Cancel(ctx, ids, h.rpc.Cancel)
}

func (h hostCalls) Release(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	return h.r.Release(ctx, ids, h.rpc.Release)
}

func (h hostCalls) SendNotifications(ctx context.Context, msgs []sdk.OutboundNotification) ([]error, error) {
	return h.r.SendNotifications(ctx, msgs, h.rpc.SendNotifications)
}

func (h hostCalls) Notifications(ctx context.Context, max int) ([]sdk.Notification, error) {
	return h.r.Notifications(ctx, max)
}

func (h hostCalls) EventsNow(max int) ([]sdk.Event, bool) { return h.r.EventsNow(max) }

func (h hostCalls) NotificationsNow(max int) ([]sdk.Notification, bool) {
	return h.r.NotificationsNow(max)
}

func (h hostCalls) ReleaseNow(ids []sdk.HandleID) ([]error, bool) { return h.r.ReleaseNow(ids) }

// calls is a hostCalls over pr's Client whose every gRPC call fails
// (noGRPC): what it answers came through the rings.
func (pr *pair) calls() (hostCalls, *noGRPC) {
	rpc := &noGRPC{}
	return hostCalls{r: pr.host, rpc: rpc}, rpc
}

// noGRPC stands for a gRPC client whose every call fails: a hostCalls over
// it proves that what it answers came through the rings.
type noGRPC struct {
	sends, cancels atomic.Int32
}

// errGRPC is what every call of noGRPC returns.
var errGRPC = sdk.Errorf(sdk.CodeBackend, "this call went over gRPC")

func (n *noGRPC) Post(context.Context, []sdk.PostSpec) ([]sdk.PostResult, error) {
	return nil, errGRPC
}

func (n *noGRPC) Poll(context.Context, []sdk.HandleID) ([]sdk.HandleStatus, error) {
	return nil, errGRPC
}

func (n *noGRPC) Cancel(context.Context, []sdk.HandleID) ([]error, error) {
	n.cancels.Add(1)
	return nil, errGRPC
}

func (n *noGRPC) Release(context.Context, []sdk.HandleID) ([]error, error) {
	return nil, errGRPC
}

func (n *noGRPC) SendNotifications(context.Context, []sdk.OutboundNotification) ([]error, error) {
	n.sends.Add(1)
	return nil, errGRPC
}
