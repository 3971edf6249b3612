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

func TestPostRefusesBadTransfers(t *testing.T) {
	b := opened(t)
	s := prepared(t, b)
	with := func(f func(*sdk.PostSpec)) sdk.PostSpec { p := s.post(); f(&p); return p }
	cases := map[string]sdk.PostSpec{
		"invalid op":             with(func(p *sdk.PostSpec) { p.Op = 0 }),
		"unknown local dlist":    with(func(p *sdk.PostSpec) { p.Local = 1 << 62 }),
		"remote dlist as local":  with(func(p *sdk.PostSpec) { p.Local = s.rd }),
		"unknown remote dlist":   with(func(p *sdk.PostSpec) { p.Remote = 1 << 62 }),
		"local dlist as remote":  with(func(p *sdk.PostSpec) { p.Remote = s.ld }),
		"empty indices":          with(func(p *sdk.PostSpec) { p.LocalIndices, p.RemoteIndices = nil, nil }),
		"index counts differ":    with(func(p *sdk.PostSpec) { p.RemoteIndices = []uint32{0, 1} }),
		"over the pair limit":    with(func(p *sdk.PostSpec) { p.LocalIndices, p.RemoteIndices = []uint32{0, 0, 0, 0}, []uint32{0, 0, 0, 0} }),
		"local index":            with(func(p *sdk.PostSpec) { p.LocalIndices[0] = 2 }),
		"remote index":           with(func(p *sdk.PostSpec) { p.RemoteIndices[0] = 2 }),
		"oversized notification": with(func(p *sdk.PostSpec) { p.Notification = make([]byte, 17) }),
	}
	before := b.Resources()
	for name, spec := range cases {
		called := false
		_, err := b.Post(spec, func(*Handle[string, string, string, int]) error { called = true; return nil })
		wantCode(t, "Post with "+name, err, sdk.CodeInvalidArgument)
		if called {
			t.Errorf("Post with %s reached the backend", name)
		}
	}
	big := NewBook[string, string, string, int]("test", sdk.Limits{MaxTransferBytes: 15})
	_ = big.Open("a", nil)
	bs := prepared(t, big)
	_, err := big.Post(sdk.PostSpec{Op: sdk.OpRead, Local: bs.ld, LocalIndices: []uint32{0, 1}, Remote: bs.rd, RemoteIndices: []uint32{0, 1}}, nil)
	wantCode(t, "Post over MaxTransferBytes", err, sdk.CodeInvalidArgument)
	gone := sdk.Errorf(sdk.CodeRemoteDisconnect, "peer gone")
	if _, err := b.Post(s.post(), func(*Handle[string, string, string, int]) error { return gone }); err != gone {
		t.Errorf("Post whose start fails: %v", err)
	}
	if after := b.Resources(); after != before {
		t.Errorf("refused posts changed Resources: %+v -> %+v", before, after)
	}
	wantCode(t, "ReleaseDlist after refused posts", b.ReleaseDlist(s.ld, nil), sdk.CodeOK)
}

func TestPostHandsTheBackendResolvedPairs(t *testing.T) {
	b := opened(t)
	s := prepared(t, b)
	var got *Handle[string, string, string, int]
	spec := s.post()
	spec.Notification = []byte("note")
	_, err := b.Post(spec, func(h *Handle[string, string, string, int]) error { got = h; h.Value = 42; return nil })
	if err != nil {
		t.Fatal(err)
	}
	spec.Notification[0] = 'X' // the caller's buffer is not the handle's
	p := got.Pairs[0]
	if len(got.Pairs) != 1 || p.Region.Value != "r" || p.Local.Offset != 0 || p.Remote.Offset != 50 || p.Remote.Region != 7 ||
		got.Remote.Peer.Value != "b" || string(got.Notification) != "note" || got.Bytes() != 10 || got.Op != sdk.OpWrite {
		t.Errorf("start saw %+v, pairs %+v", got, got.Pairs)
	}
	h, _ := b.Handle("Poll", got.ID)
	if h.Value != 42 {
		t.Errorf("the handle's value is %d, want what start set", h.Value)
	}
}

func TestHandleLifecycle(t *testing.T) {
	b := opened(t)
	s := prepared(t, b)
	id, err := b.Post(s.post(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if st := b.Poll(id); st.Err != nil || st.State != sdk.StateInProgress {
		t.Fatalf("Poll after Post: %+v", st)
	}
	if r := b.Resources(); r.Handles != 1 || r.InFlight != 1 {
		t.Errorf("Resources with one running handle: %+v", r)
	}
	wantCode(t, "Release of a running handle", b.Release(id, nil), sdk.CodeBusy)
	wantCode(t, "ReleaseDlist of a list a handle uses", b.ReleaseDlist(s.ld, nil), sdk.CodeBusy)
	stops := 0
	stop := func(*Handle[string, string, string, int]) { stops++ }
	if err := b.Cancel(id, stop); err != nil || stops != 1 {
		t.Fatalf("Cancel of a running handle: %v, stop ran %d times", err, stops)
	}
	if st := b.Poll(id); st.State != sdk.StateInProgress || b.Resources().Handles != 1 {
		t.Errorf("Cancel freed or ended the handle: %+v", st)
	}
	h, _ := b.Handle("Complete", id)
	if b.Complete(h, sdk.StateInProgress, nil) {
		t.Error("Complete accepted a state that is not terminal")
	}
	reason := sdk.Errorf(sdk.CodeCanceled, "canceled")
	if !b.Complete(h, sdk.StateCanceled, reason) {
		t.Fatal("Complete of a running handle refused")
	}
	if b.Complete(h, sdk.StateDone, nil) {
		t.Error("a second Complete changed a terminal handle")
	}
	if st := b.Poll(id); st.State != sdk.StateCanceled || st.Reason != reason {
		t.Errorf("Poll after Complete: %+v", st)
	}
	if r := b.Resources(); r.Handles != 1 || r.InFlight != 0 {
		t.Errorf("Resources with one terminal handle: %+v", r)
	}
	if err := b.Cancel(id, stop); err != nil || stops != 1 {
		t.Errorf("Cancel of a terminal handle: %v, stop ran %d times; want OK and no stop", err, stops)
	}
	fail := sdk.Errorf(sdk.CodeBackend, "native release failed")
	if err := b.Release(id, func(*Handle[string, string, string, int]) error { return fail }); err != fail || b.Poll(id).Err != nil {
		t.Fatalf("Release whose free fails: %v; want its error and the handle kept", err)
	}
	if err := b.Release(id, nil); err != nil {
		t.Fatalf("Release of a terminal handle: %v", err)
	}
	wantCode(t, "second Release", b.Release(id, nil), sdk.CodeNotFound)
	wantCode(t, "Poll after Release", b.Poll(id).Err, sdk.CodeNotFound)
	wantCode(t, "Cancel after Release", b.Cancel(id, stop), sdk.CodeNotFound)
	if b.Complete(h, sdk.StateDone, nil) {
		t.Error("Complete changed a released handle")
	}
	if err := b.ReleaseDlist(s.ld, nil); err != nil {
		t.Errorf("ReleaseDlist once its handle was released: %v", err)
	}
	if r := b.Resources(); r.Handles != 0 || r.InFlight != 0 {
		t.Errorf("Resources after Release: %+v", r)
	}
}

func TestEventsOncePerTerminalHandle(t *testing.T) {
	b := opened(t)
	s := prepared(t, b)
	var ids []sdk.HandleID
	for range 3 {
		id, _ := b.Post(s.post(), nil)
		ids = append(ids, id)
	}
	for _, id := range ids {
		h, _ := b.Handle("", id)
		b.Complete(h, sdk.StateDone, sdk.Errorf(sdk.CodeBackend, "ignored for DONE"))
		b.Complete(h, sdk.StateFailed, nil)
	}
	first := b.Events(2)
	rest := b.Events(0)
	if len(first) != 2 || len(rest) != 1 || len(b.Events(0)) != 0 {
		t.Fatalf("Events(2), Events(0), Events(0): %d, %d events; want 2, 1, then none", len(first), len(rest))
	}
	for i, e := range append(first, rest...) {
		if e.Handle != ids[i] || e.State != sdk.StateDone || e.Reason != nil {
			t.Errorf("event %d: %+v, want handle %d DONE without reason", i, e, ids[i])
		}
	}
}

// Undrained events of released handles are forgotten once MaxEvents are
// queued; those of live handles are kept.
func TestEventsBounded(t *testing.T) {
	b := opened(t)
	s := prepared(t, b)
	live, _ := b.Post(s.post(), nil)
	h, _ := b.Handle("", live)
	b.Complete(h, sdk.StateDone, nil)
	for range MaxEvents {
		id, _ := b.Post(s.post(), nil)
		h, _ := b.Handle("", id)
		b.Complete(h, sdk.StateDone, nil)
		_ = b.Release(id, nil)
	}
	evs := b.Events(0)
	if len(evs) >= MaxEvents || len(evs) == 0 || evs[0].Handle != live {
		t.Errorf("%d events queued, first %+v; want fewer than %d, the live handle's kept first", len(evs), evs[0], MaxEvents)
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

// TestBatchPost covers what a transport that starts a batch of posts in
// one native call uses: a dlist's own value set at Prepare, CheckPost
// (checked, not recorded), AddHandle, Find, and the pairs' indices.
func TestBatchPost(t *testing.T) {
	b := opened(t)
	s := prepared(t, b)
	rd, err := b.Prepare(sdk.DlistSpec{Peer: s.peer, Descriptors: []sdk.Descriptor{{Region: 7, Length: 10}, {Region: 7, Offset: 30, Length: 10}}}, func(d *Dlist[string, string, string]) error {
		d.Value = "resolved"
		return nil
	})
	if err != nil || b.Dlist(rd).Value != "resolved" {
		t.Fatalf("Prepare's accept set no value: %v, %+v", err, b.Dlist(rd))
	}
	spec := sdk.PostSpec{Op: sdk.OpWrite, Local: s.ld, LocalIndices: []uint32{1, 0}, Remote: rd, RemoteIndices: []uint32{0, 1}}
	h, err := b.CheckPost(spec)
	if err != nil {
		t.Fatal(err)
	}
	if p := h.Pairs[0]; p.LocalIndex != 1 || p.RemoteIndex != 0 || p.Local.Offset != 10 || h.Pairs[1].RemoteIndex != 1 || h.Remote.Value != "resolved" {
		t.Errorf("pairs %+v: indices or descriptors wrong", h.Pairs)
	}
	// Checked, not recorded: nothing is held or pinned, Find knows nothing.
	if r := b.Resources(); r.Handles != 0 || r.InFlight != 0 || b.Find(h.ID) != nil {
		t.Fatalf("an unadded handle is held: %+v", r)
	}
	wantCode(t, "Poll of an unadded handle", b.Poll(h.ID).Err, sdk.CodeNotFound)
	skipped, err := b.CheckPost(spec)
	if err != nil || skipped.ID == h.ID {
		t.Fatalf("a second check reused id %d: %v", h.ID, err)
	}
	b.AddHandle(h)
	if b.Find(h.ID) != h || b.Poll(h.ID).State != sdk.StateInProgress {
		t.Fatalf("AddHandle did not record handle %d", h.ID)
	}
	if r := b.Resources(); r.Handles != 1 || r.InFlight != 1 {
		t.Errorf("after AddHandle: %+v", r)
	}
	wantCode(t, "ReleaseDlist of a dlist an added handle uses", b.ReleaseDlist(rd, nil), sdk.CodeBusy)
	if next, _ := b.CheckPost(spec); next.ID == skipped.ID || next.ID == h.ID {
		t.Errorf("an id was handed out twice")
	}
}
