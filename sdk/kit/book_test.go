package kit

import (
	"errors"
	"strings"
	"testing"

	"github.com/custody-dev/custody/sdk"
)

// book is the Book the tests use: regions, peers and dlists carry a
// name, handles an int.
type book = Book[string, string, string, int]

var limits = sdk.Limits{
	MaxDescriptorsPerList: 4,
	MaxDescriptorsPerPost: 3,
	MaxItemsPerCall:       8,
	MaxNotificationBytes:  16,
	MaxMetadataBytes:      32,
	MaxTransferBytes:      1000,
}

// opened returns an open Book.
func opened(t *testing.T) *book {
	t.Helper()
	b := NewBook[string, string, string, int]("test", limits)
	if err := b.Open("a", nil); err != nil {
		t.Fatal(err)
	}
	return b
}

// wantCode fails unless err has code c.
func wantCode(t *testing.T, what string, err error, c sdk.Code) {
	t.Helper()
	if got := sdk.CodeOf(err); got != c {
		t.Errorf("%s: code %v (%v), want %v", what, got, err, c)
	}
}

// setup registers a 100-byte region, loads a peer with a 100-byte region
// 7, and prepares a local and a remote dlist of two 10-byte descriptors.
type setup struct {
	region sdk.RegionID
	peer   sdk.PeerID
	ld, rd sdk.DlistID
}

func prepared(t *testing.T, b *book) setup {
	t.Helper()
	var s setup
	var err error
	if s.region, err = b.Register(sdk.Region{Path: "/r", Length: 100}, func() (string, error) { return "r", nil }); err != nil {
		t.Fatal(err)
	}
	if s.peer, err = b.LoadPeer(sdk.PeerSpec{Name: "b"}, func() (Loaded[string], error) {
		return Loaded[string]{Value: "b", Regions: map[sdk.RegionID]uint64{7: 100}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if s.ld, err = b.Prepare(sdk.DlistSpec{Descriptors: []sdk.Descriptor{{Region: s.region, Length: 10}, {Region: s.region, Offset: 10, Length: 10}}}, nil); err != nil {
		t.Fatal(err)
	}
	if s.rd, err = b.Prepare(sdk.DlistSpec{Peer: s.peer, Descriptors: []sdk.Descriptor{{Region: 7, Length: 10}, {Region: 7, Offset: 50, Length: 10}}}, nil); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s setup) post() sdk.PostSpec {
	return sdk.PostSpec{Op: sdk.OpWrite, Local: s.ld, LocalIndices: []uint32{0}, Remote: s.rd, RemoteIndices: []uint32{1}}
}

func TestIDsAreUniqueAcrossKindsAndBooks(t *testing.T) {
	seen := map[uint64]bool{}
	add := func(id uint64) {
		t.Helper()
		if id == 0 || seen[id] {
			t.Fatalf("id %d is zero or was handed out before", id)
		}
		seen[id] = true
	}
	for range 2 {
		b := opened(t)
		s := prepared(t, b)
		add(uint64(s.region))
		add(uint64(s.peer))
		add(uint64(s.ld))
		add(uint64(s.rd))
		h, err := b.Post(s.post(), nil)
		if err != nil {
			t.Fatal(err)
		}
		add(uint64(h))
		// A post whose start fails burns its id: the next one differs.
		var burnt sdk.HandleID
		_, err = b.Post(s.post(), func(h *Handle[string, string, string, int]) error { burnt = h.ID; return errors.New("no") })
		if err == nil {
			t.Fatal("a failed start posted")
		}
		add(uint64(burnt))
		h2, _ := b.Post(s.post(), nil)
		add(uint64(h2))
	}
}

func TestGate(t *testing.T) {
	b := NewBook[string, string, string, int]("test", limits)
	wantCode(t, "Check before Open", b.Check(), sdk.CodeInvalidArgument)
	_, err := b.Close(nil)
	wantCode(t, "Close before Open", err, sdk.CodeInvalidArgument)
	wantCode(t, "Open with an empty name", b.Open("", nil), sdk.CodeInvalidArgument)
	fail := sdk.Errorf(sdk.CodeBackend, "start failed")
	if err := b.Open("a", func() error { return fail }); err != fail {
		t.Errorf("Open whose start fails: %v, want the start's error", err)
	}
	wantCode(t, "Check after a failed Open", b.Check(), sdk.CodeInvalidArgument)
	if err := b.Open("a", nil); err != nil {
		t.Fatalf("Open after a failed one: %v", err)
	}
	if err := b.Check(); err != nil {
		t.Errorf("Check while open: %v", err)
	}
	wantCode(t, "second Open", b.Open("a", nil), sdk.CodeInvalidArgument)

	s := prepared(t, b)
	ended := 0
	end := func() error { ended++; return nil }
	_, err = b.Close(end)
	wantCode(t, "Close while resources are held", err, sdk.CodeBusy)
	if ended != 0 || !b.Opened() {
		t.Fatal("a refused Close ended the agent")
	}
	for _, id := range []sdk.DlistID{s.ld, s.rd} {
		if err := b.ReleaseDlist(id, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.UnloadPeer(s.peer, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Deregister(s.region, nil); err != nil {
		t.Fatal(err)
	}
	_, err = b.Close(func() error { return fail })
	if err != fail || !b.Opened() {
		t.Fatalf("Close whose end fails: %v, opened %v; want its error and the agent still open", err, b.Opened())
	}
	if closed, err := b.Close(end); err != nil || !closed || ended != 1 {
		t.Fatalf("Close of an agent holding nothing: closed %v, %v, end ran %d times", closed, err, ended)
	}
	if closed, err := b.Close(end); err != nil || closed || ended != 1 {
		t.Errorf("second Close: closed %v, %v, end ran %d times; want OK and nothing done", closed, err, ended)
	}
	wantCode(t, "Check after Close", b.Check(), sdk.CodeInvalidArgument)
	wantCode(t, "Open after Close", b.Open("a", nil), sdk.CodeInvalidArgument)
	if b.Deliver("x", []byte("m")) {
		t.Error("a closed agent took a notification")
	}
}

func TestItems(t *testing.T) {
	b := opened(t)
	if err := b.Items("Post", 8); err != nil {
		t.Errorf("8 items at a limit of 8: %v", err)
	}
	if err := b.Items("Post", 0); err != nil {
		t.Errorf("an empty batch: %v", err)
	}
	wantCode(t, "9 items at a limit of 8", b.Items("Post", 9), sdk.CodeInvalidArgument)
	unlimited := NewBook[string, string, string, int]("test", sdk.Limits{})
	if err := unlimited.Items("Post", 1<<20); err != nil {
		t.Errorf("no stated limit: %v", err)
	}
}

func TestRegions(t *testing.T) {
	b := opened(t)
	for _, r := range []sdk.Region{{Length: 1}, {Path: "/r"}, {Path: "/r", Offset: 1<<64 - 1, Length: 2}, {Path: "/r", Length: 1, Kind: "gpu"}} {
		called := false
		_, err := b.Register(r, func() (string, error) { called = true; return "", nil })
		wantCode(t, "Register of a bad region", err, sdk.CodeInvalidArgument)
		if called {
			t.Errorf("Register(%+v) reached the backend", r)
		}
	}
	fail := sdk.Errorf(sdk.CodeInvalidArgument, "no file")
	if _, err := b.Register(sdk.Region{Path: "/r", Length: 1}, func() (string, error) { return "", fail }); err != fail {
		t.Errorf("Register whose backend fails: %v", err)
	}
	if r := b.Resources(); !r.Zero() {
		t.Fatalf("refused registrations left %+v", r)
	}
	s := prepared(t, b)
	wantCode(t, "Deregister of a region a dlist uses", b.Deregister(s.region, nil), sdk.CodeBusy)
	wantCode(t, "Deregister of an unknown region", b.Deregister(1<<62, nil), sdk.CodeNotFound)
	if err := b.ReleaseDlist(s.ld, nil); err != nil {
		t.Fatal(err)
	}
	r := b.Regions()[0]
	r.Hold()
	wantCode(t, "Deregister of a region the transport holds", b.Deregister(s.region, nil), sdk.CodeBusy)
	r.Unhold()
	if err := b.Deregister(s.region, func(*Region[string]) error { return fail }); err != fail || len(b.Regions()) != 1 {
		t.Fatalf("Deregister whose free fails: %v, %d regions; want its error, region kept", err, len(b.Regions()))
	}
	if err := b.Deregister(s.region, nil); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "second Deregister", b.Deregister(s.region, nil), sdk.CodeNotFound)
}

func TestPeers(t *testing.T) {
	b := opened(t)
	load := func() (Loaded[string], error) { return Loaded[string]{Value: "p"}, nil }
	_, err := b.LoadPeer(sdk.PeerSpec{Metadata: []byte("x")}, load)
	wantCode(t, "LoadPeer with an empty name", err, sdk.CodeInvalidArgument)
	_, err = b.LoadPeer(sdk.PeerSpec{Name: "b", Metadata: make([]byte, 33)}, load)
	wantCode(t, "LoadPeer of metadata over the limit", err, sdk.CodeInvalidArgument)
	gone := sdk.Errorf(sdk.CodeRemoteDisconnect, "gone")
	if _, err := b.LoadPeer(sdk.PeerSpec{Name: "b"}, func() (Loaded[string], error) { return Loaded[string]{}, gone }); err != gone {
		t.Errorf("LoadPeer whose load fails: %v", err)
	}
	if r := b.Resources(); !r.Zero() {
		t.Fatalf("refused loads left %+v", r)
	}
	s := prepared(t, b)
	if p := b.Peer(s.peer); p == nil || p.Name != "b" || p.Value != "b" {
		t.Fatalf("Peer(%d) = %+v", s.peer, p)
	}
	wantCode(t, "UnloadPeer of a peer a dlist references", b.UnloadPeer(s.peer, nil), sdk.CodeBusy)
	wantCode(t, "UnloadPeer of an unknown peer", b.UnloadPeer(1<<62, nil), sdk.CodeNotFound)
	if _, err := b.CheckSend(sdk.OutboundNotification{Peer: s.peer, Message: make([]byte, 16)}); err != nil {
		t.Errorf("CheckSend at the size limit: %v", err)
	}
	_, err = b.CheckSend(sdk.OutboundNotification{Peer: s.peer, Message: make([]byte, 17)})
	wantCode(t, "CheckSend over the size limit", err, sdk.CodeInvalidArgument)
	_, err = b.CheckSend(sdk.OutboundNotification{Peer: 1 << 62})
	wantCode(t, "CheckSend to an unknown peer", err, sdk.CodeInvalidArgument)
	if err := b.ReleaseDlist(s.rd, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.UnloadPeer(s.peer, nil); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "second UnloadPeer", b.UnloadPeer(s.peer, nil), sdk.CodeNotFound)
}

func TestPrepareRefusesBadLists(t *testing.T) {
	b := opened(t)
	s := prepared(t, b)
	d := func(r sdk.RegionID, off, n uint64) sdk.Descriptor {
		return sdk.Descriptor{Region: r, Offset: off, Length: n}
	}
	cases := map[string]sdk.DlistSpec{
		"empty list":            {},
		"over the limit":        {Descriptors: []sdk.Descriptor{d(s.region, 0, 1), d(s.region, 0, 1), d(s.region, 0, 1), d(s.region, 0, 1), d(s.region, 0, 1)}},
		"unknown peer":          {Peer: 1 << 62, Descriptors: []sdk.Descriptor{d(7, 0, 1)}},
		"unknown local region":  {Descriptors: []sdk.Descriptor{d(1<<62, 0, 1)}},
		"unknown remote region": {Peer: s.peer, Descriptors: []sdk.Descriptor{d(8, 0, 1)}},
		"zero length":           {Descriptors: []sdk.Descriptor{d(s.region, 0, 0)}},
		"past the local end":    {Descriptors: []sdk.Descriptor{d(s.region, 91, 10)}},
		"past the remote end":   {Peer: s.peer, Descriptors: []sdk.Descriptor{d(7, 1, 100)}},
		"offset overflow":       {Descriptors: []sdk.Descriptor{d(s.region, 1<<64-1, 2)}},
	}
	before := b.Resources()
	for name, spec := range cases {
		_, err := b.Prepare(spec, nil)
		wantCode(t, name, err, sdk.CodeInvalidArgument)
	}
	refused := sdk.Errorf(sdk.CodeBackend, "native prepare failed")
	if _, err := b.Prepare(sdk.DlistSpec{Descriptors: []sdk.Descriptor{d(s.region, 90, 10)}}, func(*Dlist[string, string, string]) error { return refused }); err != refused {
		t.Errorf("Prepare that accept refuses: %v", err)
	}
	if after := b.Resources(); after != before {
		t.Errorf("refused lists changed Resources: %+v -> %+v", before, after)
	}
	if _, err := b.Prepare(sdk.DlistSpec{Descriptors: []sdk.Descriptor{d(s.region, 90, 10)}}, nil); err != nil {
		t.Errorf("a descriptor ending at the region's end: %v", err)
	}
}

// A dlist that names one region twice counts once among the region's
// users, which the BUSY message reports.
func TestDlistPinsEachRegionOnce(t *testing.T) {
	b := opened(t)
	s := prepared(t, b)
	err := b.Deregister(s.region, nil)
	wantCode(t, "Deregister of a region one dlist uses twice", err, sdk.CodeBusy)
	if want := "used by 1 dlists"; !strings.Contains(sdk.MessageOf(err), want) {
		t.Errorf("BUSY message %q does not say %q", sdk.MessageOf(err), want)
	}
	if err := b.ReleaseDlist(s.ld, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Deregister(s.region, nil); err != nil {
		t.Errorf("Deregister after the dlist naming it twice was released: %v", err)
	}
}

func TestInbox(t *testing.T) {
	b := NewBook[string, string, string, int]("test", limits)
	if b.Deliver("x", nil) {
		t.Error("an agent not yet open took a notification")
	}
	_ = b.Open("a", nil)
	for _, m := range []string{"1", "2", "3"} {
		b.Deliver("b", []byte(m))
	}
	got := append(b.Notifications(1), b.Notifications(0)...)
	if len(got) != 3 || string(got[0].Message) != "1" || string(got[2].Message) != "3" || got[1].From != "b" {
		t.Errorf("Notifications: %+v", got)
	}
	if len(b.Notifications(0)) != 0 {
		t.Error("a notification was delivered twice")
	}
}

func TestMisbehave(t *testing.T) {
	b := opened(t)
	s := prepared(t, b)
	first, _ := b.Post(s.post(), nil)
	h := b.Find(first)
	b.SetMisbehave(Misbehave{ReleaseRunning: true, HandleID: func() (sdk.HandleID, bool) { return first, true }})
	if err := b.Release(first, nil); err != nil {
		t.Fatalf("Release of a running handle under ReleaseRunning: %v", err)
	}
	// Its bytes still move: it is in flight, though no handle is live.
	if r := b.Resources(); r.Handles != 0 || r.InFlight != 1 {
		t.Errorf("Resources after a running handle was released: %+v, want no handle and 1 in flight", r)
	}
	if b.Complete(h, sdk.StateDone, nil) || len(b.Events(0)) != 0 {
		t.Error("the end of a released transfer made an event")
	}
	if r := b.Resources(); r.InFlight != 0 {
		t.Errorf("Resources once the released transfer ended: %+v, want none in flight", r)
	}
	if b.Complete(h, sdk.StateDone, nil); b.Resources().InFlight != 0 {
		t.Error("a second report of the same end counted again")
	}
	again, _ := b.Post(s.post(), nil)
	if again != first {
		t.Errorf("HandleID chose %d, Post used %d", first, again)
	}
}
