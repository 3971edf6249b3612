package kit

import (
	"testing"

	"github.com/custody-dev/custody/sdk"
)

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
