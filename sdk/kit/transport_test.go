package kit

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/custody-dev/custody/sdk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// stub is a Backend that records what it was asked and completes
// transfers only when told (or, with sync, inside Start).
type stub struct {
	r        Reporter
	sync     bool // complete DONE inside Start
	started  []sdk.HandleID
	stopped  []sdk.HandleID
	closed   int
	closeErr error
	sent     []string
	metadata []byte
}

func (s *stub) Describe() sdk.Description {
	return sdk.Description{Name: "stub", Limits: sdk.Limits{MaxItemsPerCall: 4, MaxMetadataBytes: 8}}
}
func (s *stub) Open(agent string, params map[string]string, r Reporter) error {
	if params["bad"] != "" {
		return sdk.Errorf(sdk.CodeInvalidArgument, "bad")
	}
	s.r = r
	return nil
}
func (s *stub) Close() error                                    { s.closed++; return s.closeErr }
func (s *stub) Register(sdk.Region) (int, error)                { return 1, nil }
func (s *stub) Deregister(*Region[int]) error                   { return nil }
func (s *stub) Metadata(string, []*Region[int]) ([]byte, error) { return s.metadata, nil }
func (s *stub) LoadPeer(string, []byte) (Loaded[int], error) {
	return Loaded[int]{Regions: map[sdk.RegionID]uint64{1: 64}}, nil
}
func (s *stub) UnloadPeer(*Peer[int]) error { return nil }
func (s *stub) Start(x *Transfer[int, int]) (func(), error) {
	s.started = append(s.started, x.ID)
	if s.sync {
		s.r.Complete(x.ID, sdk.StateDone, nil)
	}
	id := x.ID
	return func() { s.stopped = append(s.stopped, id) }, nil
}
func (s *stub) Send(p *Peer[int], msg []byte) error { s.sent = append(s.sent, string(msg)); return nil }

// linked opens a stub Transport with a region, a loopback peer and a
// local and a remote dlist.
func linked(t *testing.T, s *stub) (*Transport[int, int], sdk.PostSpec) {
	t.Helper()
	ctx := context.Background()
	tr := New[int, int](s)
	if err := tr.Open(ctx, sdk.OpenRequest{Agent: "a"}); err != nil {
		t.Fatal(err)
	}
	regs, _ := tr.RegisterMemory(ctx, []sdk.Region{{Path: "/r", Length: 64}})
	peers, _ := tr.LoadPeers(ctx, []sdk.PeerSpec{{Name: "a", Metadata: []byte("m")}})
	ls, _ := tr.PrepareDescriptors(ctx, []sdk.DlistSpec{{Descriptors: []sdk.Descriptor{{Region: regs[0].ID, Length: 8}}}, {Peer: peers[0].ID, Descriptors: []sdk.Descriptor{{Region: 1, Length: 8}}}})
	for _, l := range ls {
		if l.Err != nil {
			t.Fatal(l.Err)
		}
	}
	return tr, sdk.PostSpec{Op: sdk.OpWrite, Local: ls[0].ID, LocalIndices: []uint32{0}, Remote: ls[1].ID, RemoteIndices: []uint32{0}}
}

func TestTransportAppliesReportsAtTheNextCall(t *testing.T) {
	ctx := context.Background()
	s := &stub{}
	tr, spec := linked(t, s)
	res, err := tr.Post(ctx, []sdk.PostSpec{spec})
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	id := res[0].ID
	select {
	case <-tr.Wake():
		t.Fatal("woken before any report")
	default:
	}
	s.r.Complete(id, sdk.StateDone, nil)
	s.r.Complete(id, sdk.StateFailed, sdk.ErrBackend) // only the first counts
	<-tr.Wake()
	sts, _ := tr.Poll(ctx, []sdk.HandleID{id})
	if sts[0].State != sdk.StateDone {
		t.Fatalf("Poll after a DONE report: %+v", sts[0])
	}
	evs, _ := tr.Events(ctx, 0)
	if len(evs) != 1 || evs[0].Handle != id || evs[0].State != sdk.StateDone {
		t.Errorf("Events: %+v, want one DONE", evs)
	}
	s.r.Deliver("b", []byte("hi"))
	<-tr.Wake()
	ns, _ := tr.Notifications(ctx, 0)
	if len(ns) != 1 || ns[0].From != "b" || string(ns[0].Message) != "hi" {
		t.Errorf("Notifications: %+v", ns)
	}
}

// A backend may report from inside Start without deadlocking.
func TestTransportReportInsideStart(t *testing.T) {
	ctx := context.Background()
	s := &stub{sync: true}
	tr, spec := linked(t, s)
	res, _ := tr.Post(ctx, []sdk.PostSpec{spec})
	sts, _ := tr.Poll(ctx, []sdk.HandleID{res[0].ID})
	if sts[0].State != sdk.StateDone {
		t.Errorf("Poll after a report inside Start: %+v", sts[0])
	}
}

func TestTransportCancelStopsOnlyRunningHandles(t *testing.T) {
	ctx := context.Background()
	s := &stub{}
	tr, spec := linked(t, s)
	res, _ := tr.Post(ctx, []sdk.PostSpec{spec, spec})
	a, b := res[0].ID, res[1].ID
	s.r.Complete(b, sdk.StateDone, nil)
	errs, err := tr.Cancel(ctx, []sdk.HandleID{a, b, 1 << 62})
	if err != nil || errs[0] != nil || errs[1] != nil || sdk.CodeOf(errs[2]) != sdk.CodeNotFound {
		t.Fatalf("Cancel: %v %v", errs, err)
	}
	if len(s.stopped) != 1 || s.stopped[0] != a {
		t.Errorf("stop ran for %v, want only the running handle %d", s.stopped, a)
	}
	if r, _ := tr.Resources(ctx); r.Handles != 2 || r.InFlight != 1 {
		t.Errorf("Resources after Cancel: %+v; Cancel frees nothing", r)
	}
}

func TestTransportRefusesWholeBatchesOverTheLimit(t *testing.T) {
	ctx := context.Background()
	s := &stub{}
	tr, spec := linked(t, s)
	res, err := tr.Post(ctx, []sdk.PostSpec{spec, spec, spec, spec, spec})
	if sdk.CodeOf(err) != sdk.CodeInvalidArgument || res != nil || len(s.started) != 0 {
		t.Errorf("Post of 5 items at a limit of 4: %v, %v, %d started; want INVALID_ARGUMENT for the call, nothing started", res, err, len(s.started))
	}
}

func TestTransportGateAndContext(t *testing.T) {
	s := &stub{}
	tr := New[int, int](s)
	ctx := context.Background()
	if _, err := tr.Poll(ctx, nil); sdk.CodeOf(err) != sdk.CodeInvalidArgument {
		t.Errorf("Poll before Open: %v", err)
	}
	if err := tr.Open(ctx, sdk.OpenRequest{Agent: "a", Params: map[string]string{"bad": "1"}}); sdk.CodeOf(err) != sdk.CodeInvalidArgument {
		t.Errorf("Open with a bad parameter: %v", err)
	}
	if err := tr.Open(ctx, sdk.OpenRequest{Agent: "a"}); err != nil {
		t.Fatalf("Open after a refused one: %v", err)
	}
	if d, _ := tr.Describe(ctx); d.ContractMajor != sdk.ContractMajor {
		t.Errorf("Describe's contract version: %d", d.ContractMajor)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := tr.Poll(canceled, nil); sdk.CodeOf(err) != sdk.CodeCanceled {
		t.Errorf("Poll with a canceled context: %v", err)
	}
	expired, cancel2 := context.WithDeadline(ctx, time.Unix(0, 0))
	defer cancel2()
	if _, err := tr.Poll(expired, nil); sdk.CodeOf(err) != sdk.CodeTimeout {
		t.Errorf("Poll past its deadline: %v", err)
	}
	s.metadata = make([]byte, 9)
	if _, err := tr.LocalMetadata(ctx); sdk.CodeOf(err) != sdk.CodeBackend {
		t.Errorf("LocalMetadata over the limit: %v", err)
	}
	regs, _ := tr.RegisterMemory(ctx, []sdk.Region{{Path: "/r", Length: 1}})
	if err := tr.Close(ctx); sdk.CodeOf(err) != sdk.CodeBusy || s.closed != 0 {
		t.Errorf("Close while a region is held: %v, backend closed %d times", err, s.closed)
	}
	_, _ = tr.DeregisterMemory(ctx, []sdk.RegionID{regs[0].ID})
	s.closeErr = errors.New("stuck")
	if err := tr.Close(ctx); err != s.closeErr {
		t.Errorf("Close whose backend fails: %v", err)
	}
	s.closeErr = nil
	if err := tr.Close(ctx); err != nil || s.closed != 2 {
		t.Errorf("Close: %v, backend closed %d times", err, s.closed)
	}
	if err := tr.Close(ctx); err != nil || s.closed != 2 {
		t.Errorf("second Close: %v, backend closed %d times; want OK and no backend call", err, s.closed)
	}
	if _, err := tr.Poll(ctx, nil); sdk.CodeOf(err) != sdk.CodeInvalidArgument {
		t.Errorf("Poll after Close: %v", err)
	}
}
