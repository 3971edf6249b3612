package plugin

import (
	"fmt"

	"github.com/custody-dev/custody/sdk"
	pb "github.com/custody-dev/custody/sdk/plugin/proto/custody/transport/v1"
)

// This file converts between the Go-native contract and its proto. The
// conversion is lossless for everything the contract carries: every error,
// per item or per call, crosses as its Code and message and comes back as an
// *Error of the same Code and message, so errors.Is against the sentinels
// holds on the host exactly as in-process.

// statusOf is the proto form of an item's error: nil for nil, so an OK item
// costs nothing on the wire.
func statusOf(err error) *pb.Status {
	if err == nil {
		return nil
	}
	c := sdk.CodeOf(err)
	msg := sdk.MessageOf(err)
	if c == sdk.CodeOK {
		// A non-nil error must never read as success on the other side.
		c = sdk.CodeBackend
		msg = "transport returned an error with code OK: " + msg
	}
	return &pb.Status{Code: uint32(c), Message: msg}
}

// errOf is the error a proto Status stands for: nil for nil or OK.
func errOf(s *pb.Status) error {
	if s == nil {
		return nil
	}
	c := s.GetCode()
	if c > 0xff {
		return &sdk.Error{Code: sdk.CodeBackend, Message: fmt.Sprintf("transport sent unknown code %d: %s", c, s.GetMessage())}
	}
	return sdk.FromCode(sdk.Code(c), s.GetMessage())
}

func statusesOf(errs []error) *pb.Statuses {
	items := make([]*pb.Status, len(errs))
	for i, err := range errs {
		items[i] = statusOf(err)
	}
	return &pb.Statuses{Items: items}
}

func errsOf(s *pb.Statuses) []error {
	items := s.GetItems()
	errs := make([]error, len(items))
	for i, it := range items {
		errs[i] = errOf(it)
	}
	return errs
}

func idsOf[T ~uint64](ids []T) *pb.IDs {
	out := make([]uint64, len(ids))
	for i, id := range ids {
		out[i] = uint64(id)
	}
	return &pb.IDs{Ids: out}
}

func idsFrom[T ~uint64](ids *pb.IDs) []T {
	in := ids.GetIds()
	out := make([]T, len(in))
	for i, id := range in {
		out[i] = T(id)
	}
	return out
}

func idResultOf[T ~uint64](id T, err error) *pb.IDResult {
	return &pb.IDResult{Id: uint64(id), Status: statusOf(err)}
}

func descriptionOf(d sdk.Description) *pb.DescribeResponse {
	kinds := make([]string, len(d.MemoryKinds))
	for i, k := range d.MemoryKinds {
		kinds[i] = string(k)
	}
	return &pb.DescribeResponse{
		Name:          d.Name,
		Version:       d.Version,
		ContractMajor: d.ContractMajor,
		ContractMinor: d.ContractMinor,
		MemoryKinds:   kinds,
		Capabilities: &pb.Capabilities{
			Remote:        d.Capabilities.Remote,
			Local:         d.Capabilities.Local,
			Notifications: d.Capabilities.Notifications,
			Cancel:        d.Capabilities.Cancel,
			Events:        d.Capabilities.Events,
		},
		CancelEffect: string(d.CancelEffect),
		PeerLoss:     string(d.PeerLoss),
		FenceScope:   string(d.FenceScope),
		Limits: &pb.Limits{
			MaxDescriptorsPerList: d.Limits.MaxDescriptorsPerList,
			MaxDescriptorsPerPost: d.Limits.MaxDescriptorsPerPost,
			MaxItemsPerCall:       d.Limits.MaxItemsPerCall,
			MaxNotificationBytes:  d.Limits.MaxNotificationBytes,
			MaxMetadataBytes:      d.Limits.MaxMetadataBytes,
			MaxTransferBytes:      d.Limits.MaxTransferBytes,
			PeerLossBoundMillis:   d.Limits.PeerLossBoundMillis,
			CancelBoundMillis:     d.Limits.CancelBoundMillis,
		},
	}
}

func descriptionFrom(r *pb.DescribeResponse) sdk.Description {
	var kinds []sdk.MemoryKind
	if n := len(r.GetMemoryKinds()); n > 0 {
		kinds = make([]sdk.MemoryKind, n)
		for i, k := range r.GetMemoryKinds() {
			kinds[i] = sdk.MemoryKind(k)
		}
	}
	c, l := r.GetCapabilities(), r.GetLimits()
	return sdk.Description{
		Name:          r.GetName(),
		Version:       r.GetVersion(),
		ContractMajor: r.GetContractMajor(),
		ContractMinor: r.GetContractMinor(),
		MemoryKinds:   kinds,
		Capabilities: sdk.Capabilities{
			Remote:        c.GetRemote(),
			Local:         c.GetLocal(),
			Notifications: c.GetNotifications(),
			Cancel:        c.GetCancel(),
			Events:        c.GetEvents(),
		},
		CancelEffect: sdk.CancelEffect(r.GetCancelEffect()),
		PeerLoss:     sdk.PeerLoss(r.GetPeerLoss()),
		FenceScope:   sdk.FenceScope(r.GetFenceScope()),
		Limits: sdk.Limits{
			MaxDescriptorsPerList: l.GetMaxDescriptorsPerList(),
			MaxDescriptorsPerPost: l.GetMaxDescriptorsPerPost(),
			MaxItemsPerCall:       l.GetMaxItemsPerCall(),
			MaxNotificationBytes:  l.GetMaxNotificationBytes(),
			MaxMetadataBytes:      l.GetMaxMetadataBytes(),
			MaxTransferBytes:      l.GetMaxTransferBytes(),
			PeerLossBoundMillis:   l.GetPeerLossBoundMillis(),
			CancelBoundMillis:     l.GetCancelBoundMillis(),
		},
	}
}

func openRequestOf(r sdk.OpenRequest) *pb.OpenRequest {
	return &pb.OpenRequest{Agent: r.Agent, Params: r.Params}
}

func openRequestFrom(r *pb.OpenRequest) sdk.OpenRequest {
	return sdk.OpenRequest{Agent: r.GetAgent(), Params: r.GetParams()}
}

func regionsOf(regions []sdk.Region) *pb.RegisterMemoryRequest {
	out := make([]*pb.Region, len(regions))
	for i, r := range regions {
		out[i] = &pb.Region{Path: r.Path, Offset: r.Offset, Length: r.Length, Kind: string(r.Kind)}
	}
	return &pb.RegisterMemoryRequest{Regions: out}
}

func regionsFrom(req *pb.RegisterMemoryRequest) []sdk.Region {
	in := req.GetRegions()
	out := make([]sdk.Region, len(in))
	for i, r := range in {
		out[i] = sdk.Region{Path: r.GetPath(), Offset: r.GetOffset(), Length: r.GetLength(), Kind: sdk.MemoryKind(r.GetKind())}
	}
	return out
}

func registrationsOf(regs []sdk.Registration) *pb.RegisterMemoryResponse {
	out := make([]*pb.IDResult, len(regs))
	for i, r := range regs {
		out[i] = idResultOf(r.ID, r.Err)
	}
	return &pb.RegisterMemoryResponse{Items: out}
}

func registrationsFrom(items []*pb.IDResult) []sdk.Registration {
	out := make([]sdk.Registration, len(items))
	for i, it := range items {
		out[i] = sdk.Registration{ID: sdk.RegionID(it.GetId()), Err: errOf(it.GetStatus())}
	}
	return out
}

func peerSpecsOf(peers []sdk.PeerSpec) *pb.LoadPeersRequest {
	out := make([]*pb.PeerSpec, len(peers))
	for i, p := range peers {
		out[i] = &pb.PeerSpec{Name: p.Name, Metadata: p.Metadata}
	}
	return &pb.LoadPeersRequest{Peers: out}
}

func peerSpecsFrom(req *pb.LoadPeersRequest) []sdk.PeerSpec {
	in := req.GetPeers()
	out := make([]sdk.PeerSpec, len(in))
	for i, p := range in {
		out[i] = sdk.PeerSpec{Name: p.GetName(), Metadata: p.GetMetadata()}
	}
	return out
}

func peerResultsOf(results []sdk.PeerResult) *pb.LoadPeersResponse {
	out := make([]*pb.IDResult, len(results))
	for i, r := range results {
		out[i] = idResultOf(r.ID, r.Err)
	}
	return &pb.LoadPeersResponse{Items: out}
}

func peerResultsFrom(items []*pb.IDResult) []sdk.PeerResult {
	out := make([]sdk.PeerResult, len(items))
	for i, it := range items {
		out[i] = sdk.PeerResult{ID: sdk.PeerID(it.GetId()), Err: errOf(it.GetStatus())}
	}
	return out
}

func dlistSpecsOf(lists []sdk.DlistSpec) *pb.PrepareDescriptorsRequest {
	out := make([]*pb.DlistSpec, len(lists))
	for i, l := range lists {
		descs := make([]*pb.Descriptor, len(l.Descriptors))
		for j, d := range l.Descriptors {
			descs[j] = &pb.Descriptor{Region: uint64(d.Region), Offset: d.Offset, Length: d.Length}
		}
		out[i] = &pb.DlistSpec{Peer: uint64(l.Peer), Descriptors: descs}
	}
	return &pb.PrepareDescriptorsRequest{Lists: out}
}

func dlistSpecsFrom(req *pb.PrepareDescriptorsRequest) []sdk.DlistSpec {
	in := req.GetLists()
	out := make([]sdk.DlistSpec, len(in))
	for i, l := range in {
		var descs []sdk.Descriptor
		if n := len(l.GetDescriptors()); n > 0 {
			descs = make([]sdk.Descriptor, n)
			for j, d := range l.GetDescriptors() {
				descs[j] = sdk.Descriptor{Region: sdk.RegionID(d.GetRegion()), Offset: d.GetOffset(), Length: d.GetLength()}
			}
		}
		out[i] = sdk.DlistSpec{Peer: sdk.PeerID(l.GetPeer()), Descriptors: descs}
	}
	return out
}

func dlistResultsOf(results []sdk.DlistResult) *pb.PrepareDescriptorsResponse {
	out := make([]*pb.IDResult, len(results))
	for i, r := range results {
		out[i] = idResultOf(r.ID, r.Err)
	}
	return &pb.PrepareDescriptorsResponse{Items: out}
}

func dlistResultsFrom(items []*pb.IDResult) []sdk.DlistResult {
	out := make([]sdk.DlistResult, len(items))
	for i, it := range items {
		out[i] = sdk.DlistResult{ID: sdk.DlistID(it.GetId()), Err: errOf(it.GetStatus())}
	}
	return out
}

func postSpecsOf(posts []sdk.PostSpec) *pb.PostRequest {
	out := make([]*pb.PostSpec, len(posts))
	for i, p := range posts {
		out[i] = &pb.PostSpec{
			Op:            uint32(p.Op),
			Local:         uint64(p.Local),
			LocalIndices:  p.LocalIndices,
			Remote:        uint64(p.Remote),
			RemoteIndices: p.RemoteIndices,
			Notification:  p.Notification,
		}
	}
	return &pb.PostRequest{Posts: out}
}

func postSpecsFrom(req *pb.PostRequest) []sdk.PostSpec {
	in := req.GetPosts()
	out := make([]sdk.PostSpec, len(in))
	for i, p := range in {
		op := p.GetOp()
		if op > 0xff {
			// Keep it invalid rather than letting truncation make it valid:
			// the transport answers INVALID_ARGUMENT for it.
			op = 0
		}
		out[i] = sdk.PostSpec{
			Op:            sdk.Op(op),
			Local:         sdk.DlistID(p.GetLocal()),
			LocalIndices:  p.GetLocalIndices(),
			Remote:        sdk.DlistID(p.GetRemote()),
			RemoteIndices: p.GetRemoteIndices(),
			Notification:  p.GetNotification(),
		}
	}
	return out
}

func postResultsOf(results []sdk.PostResult) *pb.PostResponse {
	out := make([]*pb.IDResult, len(results))
	for i, r := range results {
		out[i] = idResultOf(r.ID, r.Err)
	}
	return &pb.PostResponse{Items: out}
}

func postResultsFrom(items []*pb.IDResult) []sdk.PostResult {
	out := make([]sdk.PostResult, len(items))
	for i, it := range items {
		out[i] = sdk.PostResult{ID: sdk.HandleID(it.GetId()), Err: errOf(it.GetStatus())}
	}
	return out
}

// handleStatusesOf allocates the items of a poll answer in one slab: Poll
// is the hot path, and its answer may hold thousands of them.
func handleStatusesOf(sts []sdk.HandleStatus) *pb.PollResponse {
	out := make([]*pb.HandleStatus, len(sts))
	slab := make([]pb.HandleStatus, len(sts))
	for i, s := range sts {
		h := &slab[i]
		h.State, h.Reason, h.Status = uint32(s.State), statusOf(s.Reason), statusOf(s.Err)
		out[i] = h
	}
	return &pb.PollResponse{Items: out}
}

func handleStatusesFrom(items []*pb.HandleStatus) []sdk.HandleStatus {
	out := make([]sdk.HandleStatus, len(items))
	for i, it := range items {
		out[i] = sdk.HandleStatus{State: stateFrom(it.GetState()), Reason: errOf(it.GetReason()), Err: errOf(it.GetStatus())}
	}
	return out
}

// stateFrom keeps an out-of-range state out of range rather than letting
// truncation turn it into a valid one: an unknown state is never terminal.
func stateFrom(s uint32) sdk.State {
	if s > 0xff {
		return 0
	}
	return sdk.State(s)
}

func outboundOf(msgs []sdk.OutboundNotification) *pb.SendNotificationsRequest {
	out := make([]*pb.OutboundNotification, len(msgs))
	for i, m := range msgs {
		out[i] = &pb.OutboundNotification{Peer: uint64(m.Peer), Message: m.Message}
	}
	return &pb.SendNotificationsRequest{Messages: out}
}

func outboundFrom(req *pb.SendNotificationsRequest) []sdk.OutboundNotification {
	in := req.GetMessages()
	out := make([]sdk.OutboundNotification, len(in))
	for i, m := range in {
		out[i] = sdk.OutboundNotification{Peer: sdk.PeerID(m.GetPeer()), Message: m.GetMessage()}
	}
	return out
}

func notificationsOf(ns []sdk.Notification) *pb.NotificationsResponse {
	out := make([]*pb.Notification, len(ns))
	for i, n := range ns {
		out[i] = &pb.Notification{From: n.From, Message: n.Message}
	}
	return &pb.NotificationsResponse{Messages: out}
}

func notificationsFrom(r *pb.NotificationsResponse) []sdk.Notification {
	in := r.GetMessages()
	if len(in) == 0 {
		return nil
	}
	out := make([]sdk.Notification, len(in))
	for i, n := range in {
		out[i] = sdk.Notification{From: n.GetFrom(), Message: n.GetMessage()}
	}
	return out
}

func resourcesOf(r sdk.Resources) *pb.ResourcesResponse {
	return &pb.ResourcesResponse{Regions: r.Regions, Peers: r.Peers, Dlists: r.Dlists, Handles: r.Handles, InFlight: r.InFlight}
}

func resourcesFrom(r *pb.ResourcesResponse) sdk.Resources {
	return sdk.Resources{Regions: r.GetRegions(), Peers: r.GetPeers(), Dlists: r.GetDlists(), Handles: r.GetHandles(), InFlight: r.GetInFlight()}
}

func eventsOf(evs []sdk.Event) *pb.EventsResponse {
	out := make([]*pb.Event, len(evs))
	for i, e := range evs {
		out[i] = &pb.Event{Handle: uint64(e.Handle), State: uint32(e.State), Reason: statusOf(e.Reason)}
	}
	return &pb.EventsResponse{Events: out}
}

func eventsFrom(r *pb.EventsResponse) []sdk.Event {
	in := r.GetEvents()
	if len(in) == 0 {
		return nil
	}
	out := make([]sdk.Event, len(in))
	for i, e := range in {
		out[i] = sdk.Event{Handle: sdk.HandleID(e.GetHandle()), State: stateFrom(e.GetState()), Reason: errOf(e.GetReason())}
	}
	return out
}
