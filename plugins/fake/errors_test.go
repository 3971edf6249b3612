package fake

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// TestRegisterErrors: bad regions are INVALID_ARGUMENT and register
// nothing; good items in the same batch still register.
func TestRegisterErrors(t *testing.T) {
	a := open(t, "a", nil)
	path := regionFile(t, 8192, 0)
	cases := []struct {
		name   string
		region sdk.Region
	}{
		{"empty path", sdk.Region{Length: 1}},
		{"zero length", sdk.Region{Path: path}},
		{"missing file", sdk.Region{Path: path + ".nope", Length: 1}},
		{"beyond file", sdk.Region{Path: path, Offset: 8000, Length: 193}},
		{"offset overflow", sdk.Region{Path: path, Offset: ^uint64(0), Length: 2}},
		{"unknown kind", sdk.Region{Path: path, Length: 1, Kind: "cuda"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			regs, err := a.RegisterMemory(ctx, []sdk.Region{c.region, {Path: path, Length: 8192}})
			require.NoError(t, err)
			require.Len(t, regs, 2)
			require.ErrorIs(t, regs[0].Err, sdk.ErrInvalidArgument)
			require.Zero(t, regs[0].ID)
			require.NoError(t, regs[1].Err)
			res, err := a.Resources(ctx)
			require.NoError(t, err)
			require.Equal(t, uint64(1), res.Regions, "only the good item registered")
			errs, err := a.DeregisterMemory(ctx, []sdk.RegionID{regs[1].ID})
			require.NoError(t, err)
			require.NoError(t, errs[0])
		})
	}
}

// TestNotFound: unknown or already released ids are NOT_FOUND everywhere
// they name the resource to act on.
func TestNotFound(t *testing.T) {
	p := newPair(t, 4096, nil, nil)
	h := postOne(t, p.a, p.whole(sdk.OpWrite, nil))
	terminal(t, p.a, h)
	release(t, p.a, h)

	errs, err := p.a.Release(ctx, []sdk.HandleID{h, 0, 123456789})
	require.NoError(t, err)
	for _, e := range errs {
		require.ErrorIs(t, e, sdk.ErrNotFound)
	}
	st, err := p.a.Poll(ctx, []sdk.HandleID{h})
	require.NoError(t, err)
	require.ErrorIs(t, st[0].Err, sdk.ErrNotFound)
	require.Zero(t, st[0].State, "a failed poll reports no state")
	errs, err = p.a.Cancel(ctx, []sdk.HandleID{h})
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], sdk.ErrNotFound)
	errs, err = p.a.DeregisterMemory(ctx, []sdk.RegionID{p.bRegion}) // b's region, not a's
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], sdk.ErrNotFound)
	errs, err = p.a.UnloadPeers(ctx, []sdk.PeerID{987654321})
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], sdk.ErrNotFound)
	errs, err = p.a.ReleaseDescriptors(ctx, []sdk.DlistID{987654321})
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], sdk.ErrNotFound)
}

// TestPrepareErrors: bad dlists are INVALID_ARGUMENT and prepare nothing.
func TestPrepareErrors(t *testing.T) {
	p := newPair(t, 4096, nil, nil)
	cases := []struct {
		name string
		spec sdk.DlistSpec
	}{
		{"empty", sdk.DlistSpec{}},
		{"unknown local region", sdk.DlistSpec{Descriptors: []sdk.Descriptor{{Region: p.bRegion, Length: 1}}}},
		{"unknown remote region", sdk.DlistSpec{Peer: p.peer, Descriptors: []sdk.Descriptor{{Region: p.aRegion, Length: 1}}}},
		{"unknown peer", sdk.DlistSpec{Peer: 987654321, Descriptors: []sdk.Descriptor{{Region: p.bRegion, Length: 1}}}},
		{"zero length", sdk.DlistSpec{Descriptors: []sdk.Descriptor{{Region: p.aRegion}}}},
		{"beyond region", sdk.DlistSpec{Descriptors: []sdk.Descriptor{{Region: p.aRegion, Offset: 4000, Length: 97}}}},
		{"offset beyond region", sdk.DlistSpec{Peer: p.peer, Descriptors: []sdk.Descriptor{{Region: p.bRegion, Offset: 5000, Length: 1}}}},
		{"overflow", sdk.DlistSpec{Descriptors: []sdk.Descriptor{{Region: p.aRegion, Offset: 1, Length: ^uint64(0)}}}},
		{"one bad of many", sdk.DlistSpec{Descriptors: []sdk.Descriptor{{Region: p.aRegion, Length: 1}, {Region: p.aRegion, Offset: 4096, Length: 1}}}},
		{"too many", sdk.DlistSpec{Descriptors: make([]sdk.Descriptor, maxDescriptorsPerList+1)}},
	}
	before, err := p.a.Resources(ctx)
	require.NoError(t, err)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := p.a.PrepareDescriptors(ctx, []sdk.DlistSpec{c.spec})
			require.NoError(t, err)
			require.ErrorIs(t, res[0].Err, sdk.ErrInvalidArgument)
			require.Zero(t, res[0].ID)
			after, err := p.a.Resources(ctx)
			require.NoError(t, err)
			require.Equal(t, before, after, "nothing changed")
		})
	}
	// A refused dlist holds nothing: the region deregisters (after the
	// pair's own dlists go).
	errs, err := p.a.ReleaseDescriptors(ctx, []sdk.DlistID{p.local, p.remote})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	errs, err = p.a.DeregisterMemory(ctx, []sdk.RegionID{p.aRegion})
	require.NoError(t, err)
	require.NoError(t, errs[0])
}

// TestPostErrors: bad posts are INVALID_ARGUMENT, make no handle, and leave
// the other items of the batch alone.
func TestPostErrors(t *testing.T) {
	p := newPair(t, 4096, nil, nil)
	two := prepare(t, p.a, 0, sdk.Descriptor{Region: p.aRegion, Length: 10}, sdk.Descriptor{Region: p.aRegion, Offset: 10, Length: 20})
	rtwo := prepare(t, p.a, p.peer, sdk.Descriptor{Region: p.bRegion, Length: 10}, sdk.Descriptor{Region: p.bRegion, Offset: 10, Length: 21})
	ok := sdk.PostSpec{Op: sdk.OpWrite, Local: two, LocalIndices: []uint32{0}, Remote: rtwo, RemoteIndices: []uint32{0}}
	with := func(f func(*sdk.PostSpec)) sdk.PostSpec {
		s := ok
		f(&s)
		return s
	}
	cases := []struct {
		name string
		spec sdk.PostSpec
	}{
		{"invalid op", with(func(s *sdk.PostSpec) { s.Op = 0 })},
		{"op 3", with(func(s *sdk.PostSpec) { s.Op = 3 })},
		{"unknown local", with(func(s *sdk.PostSpec) { s.Local = 987654321 })},
		{"local is remote", with(func(s *sdk.PostSpec) { s.Local = rtwo })},
		{"unknown remote", with(func(s *sdk.PostSpec) { s.Remote = 987654321 })},
		{"remote is local", with(func(s *sdk.PostSpec) { s.Remote = two })},
		{"no indices", with(func(s *sdk.PostSpec) { s.LocalIndices, s.RemoteIndices = nil, nil })},
		{"count mismatch", with(func(s *sdk.PostSpec) { s.RemoteIndices = []uint32{0, 1} })},
		{"local index out of range", with(func(s *sdk.PostSpec) { s.LocalIndices = []uint32{2} })},
		{"remote index out of range", with(func(s *sdk.PostSpec) { s.RemoteIndices = []uint32{7} })},
		{"length mismatch", with(func(s *sdk.PostSpec) { s.LocalIndices, s.RemoteIndices = []uint32{1}, []uint32{1} })},
		{"oversized notification", with(func(s *sdk.PostSpec) { s.Notification = make([]byte, maxNotificationBytes+1) })},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := p.a.Post(ctx, []sdk.PostSpec{c.spec, ok})
			require.NoError(t, err)
			require.Len(t, res, 2)
			require.ErrorIs(t, res[0].Err, sdk.ErrInvalidArgument)
			require.Zero(t, res[0].ID)
			require.NoError(t, res[1].Err)
			require.Equal(t, sdk.StateDone, terminal(t, p.a, res[1].ID).State)
			release(t, p.a, res[1].ID)
			r, err := p.a.Resources(ctx)
			require.NoError(t, err)
			require.Zero(t, r.Handles, "the bad post made no handle")
		})
	}
	_, err := p.a.ReleaseDescriptors(ctx, []sdk.DlistID{two, rtwo})
	require.NoError(t, err)
}

// TestLoadPeersGarbage: metadata that is not a fake's current blob is
// INVALID_ARGUMENT and loads nothing.
func TestLoadPeersGarbage(t *testing.T) {
	a := open(t, "a", nil)
	b := open(t, "b", nil)
	good, err := b.LocalMetadata(ctx)
	require.NoError(t, err)
	v2 := append([]byte(nil), good...)
	v2[len(metadataMagic)+1] = metadataVersion + 1
	cases := []struct {
		name string
		spec sdk.PeerSpec
	}{
		{"nil", sdk.PeerSpec{Name: "b"}},
		{"garbage", sdk.PeerSpec{Name: "b", Metadata: []byte("hello world, not metadata")}},
		{"truncated", sdk.PeerSpec{Name: "b", Metadata: good[:len(good)-3]}},
		{"other version", sdk.PeerSpec{Name: "b", Metadata: v2}},
		{"trailing bytes", sdk.PeerSpec{Name: "b", Metadata: append(append([]byte(nil), good...), []byte("{}")...)}},
		{"wrong name", sdk.PeerSpec{Name: "c", Metadata: good}},
		{"oversized", sdk.PeerSpec{Name: "b", Metadata: make([]byte, maxMetadataBytes+1)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := a.LoadPeers(ctx, []sdk.PeerSpec{c.spec})
			require.NoError(t, err)
			require.ErrorIs(t, res[0].Err, sdk.ErrInvalidArgument)
			require.Zero(t, res[0].ID)
			r, err := a.Resources(ctx)
			require.NoError(t, err)
			require.True(t, r.Zero())
		})
	}
}

// TestBusyRefusals: what a live dlist or handle uses cannot be released,
// deregistered, unloaded or closed, and stays valid.
func TestBusyRefusals(t *testing.T) {
	p := newPair(t, 1<<20, map[string]string{"fault": "stall"}, nil)
	h := postOne(t, p.a, p.whole(sdk.OpWrite, nil))

	errs, err := p.a.Release(ctx, []sdk.HandleID{h})
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], sdk.ErrBusy, "release of a running handle")
	require.Equal(t, sdk.StateInProgress, poll(t, p.a, h).State, "the handle stays valid")

	errs, err = p.a.ReleaseDescriptors(ctx, []sdk.DlistID{p.local, p.remote})
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], sdk.ErrBusy)
	require.ErrorIs(t, errs[1], sdk.ErrBusy)
	errs, err = p.a.UnloadPeers(ctx, []sdk.PeerID{p.peer})
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], sdk.ErrBusy)
	errs, err = p.a.DeregisterMemory(ctx, []sdk.RegionID{p.aRegion})
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], sdk.ErrBusy)
	require.ErrorIs(t, p.a.Close(ctx), sdk.ErrBusy)

	r, err := p.a.Resources(ctx)
	require.NoError(t, err)
	require.Equal(t, sdk.Resources{Regions: 1, Peers: 1, Dlists: 2, Handles: 1, InFlight: 1}, r)

	errs, err = p.a.Cancel(ctx, []sdk.HandleID{h})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	st := terminal(t, p.a, h)
	require.Equal(t, sdk.StateCanceled, st.State)
	require.ErrorIs(t, st.Reason, sdk.ErrCanceled)
	r, err = p.a.Resources(ctx)
	require.NoError(t, err)
	require.Equal(t, sdk.Resources{Regions: 1, Peers: 1, Dlists: 2, Handles: 1}, r, "Cancel freed nothing")

	// A terminal but unreleased handle still holds its dlists.
	errs, err = p.a.ReleaseDescriptors(ctx, []sdk.DlistID{p.local})
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], sdk.ErrBusy)
	release(t, p.a, h)
	// Now the chain unwinds in order; each step unblocks the next.
	errs, err = p.a.DeregisterMemory(ctx, []sdk.RegionID{p.aRegion})
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], sdk.ErrBusy, "the local dlist still uses the region")
	errs, err = p.a.ReleaseDescriptors(ctx, []sdk.DlistID{p.local, p.remote})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	errs, err = p.a.UnloadPeers(ctx, []sdk.PeerID{p.peer})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	errs, err = p.a.DeregisterMemory(ctx, []sdk.RegionID{p.aRegion})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	r, err = p.a.Resources(ctx)
	require.NoError(t, err)
	require.True(t, r.Zero(), "counters return to zero: %+v", r)
	require.NoError(t, p.a.Close(ctx))
}

// TestLifecycle: calls before Open or after Close are refused, but for
// Close itself, which is OK again; Open takes a name and valid parameters,
// once.
func TestLifecycle(t *testing.T) {
	a := New()
	_, err := a.RegisterMemory(ctx, nil)
	require.ErrorIs(t, err, sdk.ErrInvalidArgument, "before Open")
	require.ErrorIs(t, a.Open(ctx, sdk.OpenRequest{}), sdk.ErrInvalidArgument, "no agent name")
	require.ErrorIs(t, a.Open(ctx, sdk.OpenRequest{Agent: "a", Params: map[string]string{"bogus": "1"}}), sdk.ErrInvalidArgument)
	require.NoError(t, a.Open(ctx, sdk.OpenRequest{Agent: "a", Params: map[string]string{"dir": t.TempDir(), "peer_dirs": os.TempDir()}}))
	require.ErrorIs(t, a.Open(ctx, sdk.OpenRequest{Agent: "a"}), sdk.ErrInvalidArgument, "twice")
	require.NoError(t, a.Close(ctx))
	require.NoError(t, a.Close(ctx), "a second Close: the agent has ended and holds nothing")
	_, err = a.Poll(ctx, []sdk.HandleID{1})
	require.ErrorIs(t, err, sdk.ErrInvalidArgument, "after Close")
	r, err := a.Resources(ctx)
	require.NoError(t, err)
	require.True(t, r.Zero())
}

// TestDescribe reports the promises the fake keeps.
func TestDescribe(t *testing.T) {
	d, err := New().Describe(ctx)
	require.NoError(t, err)
	require.Equal(t, "fake", d.Name)
	require.Equal(t, uint32(sdk.ContractMajor), d.ContractMajor)
	require.Equal(t, uint32(sdk.ContractMinor), d.ContractMinor)
	require.Equal(t, sdk.Capabilities{Remote: true, Local: true, Notifications: true, Cancel: true, Events: true}, d.Capabilities)
	require.Equal(t, sdk.CancelStops, d.CancelEffect)
	require.Equal(t, sdk.PeerLossReported, d.PeerLoss)
	require.Equal(t, sdk.FenceInitiatedAndIncoming, d.FenceScope)
	require.Equal(t, uint32(maxNotificationBytes), d.Limits.MaxNotificationBytes)
	require.Equal(t, uint32(maxMetadataBytes), d.Limits.MaxMetadataBytes)
	require.Equal(t, uint32(cancelBoundMillis), d.Limits.CancelBoundMillis, "under cancel=stops the fake states its cancel bound")

	a := open(t, "a", map[string]string{"fence": "initiated", "cancel": "none"})
	d, err = a.Describe(ctx)
	require.NoError(t, err)
	require.Equal(t, sdk.FenceInitiated, d.FenceScope)
	require.Equal(t, sdk.CancelNone, d.CancelEffect)
	require.False(t, d.Capabilities.Cancel, "Cancel does nothing more than CancelNone")
	require.Equal(t, sdk.PeerLossReported, d.PeerLoss, "fence scope does not change how peer loss shows")
}

// TestUnloadPeerReferencedByDlist: a peer that a remote dlist references
// is BUSY, with no handle anywhere, and stays loaded and usable; each of
// several dlists keeps it so; once the last is released it unloads.
func TestUnloadPeerReferencedByDlist(t *testing.T) {
	p := newPair(t, 4096, nil, nil)
	second := prepare(t, p.a, p.peer, sdk.Descriptor{Region: p.bRegion, Length: 4096})
	unload := func() error {
		t.Helper()
		errs, err := p.a.UnloadPeers(ctx, []sdk.PeerID{p.peer})
		require.NoError(t, err)
		return errs[0]
	}
	require.ErrorIs(t, unload(), sdk.ErrBusy, "two remote dlists reference the peer")
	errs, err := p.a.ReleaseDescriptors(ctx, []sdk.DlistID{p.remote})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.ErrorIs(t, unload(), sdk.ErrBusy, "one remote dlist still references the peer")
	r, err := p.a.Resources(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), r.Peers, "the refused unload left the peer loaded")
	// The peer still works: a transfer over the remaining dlist moves bytes.
	h := postOne(t, p.a, sdk.PostSpec{Op: sdk.OpWrite, Local: p.local, LocalIndices: []uint32{0}, Remote: second, RemoteIndices: []uint32{0}})
	require.Equal(t, sdk.StateDone, terminal(t, p.a, h).State)
	require.Equal(t, readFile(t, p.aPath), readFile(t, p.bPath))
	release(t, p.a, h)
	errs, err = p.a.ReleaseDescriptors(ctx, []sdk.DlistID{second})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.NoError(t, unload())
}
