//go:build nixl

package nixl

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/custody-dev/custody/sdk"
)

// agentRegion is the region openAgent registers in each agent.
var agentRegion = map[*Transport]sdk.RegionID{}

// openAgent opens an in-process agent over tcp with one 4 KiB region.
func openAgent(t *testing.T, name string) (*Transport, []byte) {
	t.Helper()
	ctx := context.Background()
	tr := New()
	if err := tr.Open(ctx, sdk.OpenRequest{Agent: name, Params: map[string]string{"tls": "tcp"}}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	regs, err := tr.RegisterMemory(ctx, []sdk.Region{{Path: path, Length: 4096}})
	if err != nil || regs[0].Err != nil {
		t.Fatal(err, regs)
	}
	agentRegion[tr] = regs[0].ID
	md, err := tr.LocalMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = tr.DeregisterMemory(ctx, []sdk.RegionID{regs[0].ID})
		if err := tr.Close(ctx); err != nil {
			t.Errorf("Close %s: %v", name, err)
		}
	})
	return tr, md
}

func load(t *testing.T, tr *Transport, name string, md []byte) (sdk.PeerID, error) {
	t.Helper()
	res, err := tr.LoadPeers(context.Background(), []sdk.PeerSpec{{Name: name, Metadata: md}})
	if err != nil {
		t.Fatal(err)
	}
	return res[0].ID, res[0].Err
}

// use READs the peer's region once: the UCX endpoint's wire-up is then
// complete, which UCX 1.13 needs before either side tears it down (doc.go).
func use(t *testing.T, tr *Transport, peer sdk.PeerID, peerRegion sdk.RegionID) {
	t.Helper()
	ctx := context.Background()
	dl, err := tr.PrepareDescriptors(ctx, []sdk.DlistSpec{
		{Descriptors: []sdk.Descriptor{{Region: agentRegion[tr], Length: 64}}},
		{Peer: peer, Descriptors: []sdk.Descriptor{{Region: peerRegion, Length: 64}}},
	})
	if err != nil || dl[0].Err != nil || dl[1].Err != nil {
		t.Fatal(err, dl)
	}
	pr, err := tr.Post(ctx, []sdk.PostSpec{{Op: sdk.OpRead, Local: dl[0].ID, LocalIndices: []uint32{0}, Remote: dl[1].ID, RemoteIndices: []uint32{0}}})
	if err != nil || pr[0].Err != nil {
		t.Fatal(err, pr)
	}
	for {
		st, err := tr.Poll(ctx, []sdk.HandleID{pr[0].ID})
		if err != nil || st[0].Err != nil {
			t.Fatal(err, st)
		}
		if st[0].State == sdk.StateDone {
			break
		}
		if st[0].State.Terminal() {
			t.Fatalf("READ ended %v: %v", st[0].State, st[0].Reason)
		}
	}
	if errs, err := tr.Release(ctx, []sdk.HandleID{pr[0].ID}); err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}
	if errs, err := tr.ReleaseDescriptors(ctx, []sdk.DlistID{dl[0].ID, dl[1].ID}); err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatal(err, errs)
	}
}

func unload(t *testing.T, tr *Transport, id sdk.PeerID) {
	t.Helper()
	errs, err := tr.UnloadPeers(context.Background(), []sdk.PeerID{id})
	if err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}
}

// TestLoadRefused: a name other than the metadata's agent, and the
// agent's own metadata, load nothing.
func TestLoadRefused(t *testing.T) {
	a, amd := openAgent(t, "refuse-a")
	_, bmd := openAgent(t, "refuse-b")
	if _, err := load(t, a, "someone-else", bmd); sdk.CodeOf(err) != sdk.CodeInvalidArgument {
		t.Errorf("wrong name: got %v, want INVALID_ARGUMENT", err)
	}
	if _, err := load(t, a, "refuse-a", amd); sdk.CodeOf(err) != sdk.CodeInvalidArgument {
		t.Errorf("own metadata: got %v, want INVALID_ARGUMENT", err)
	}
	if r, _ := a.Resources(context.Background()); r.Peers != 0 || len(a.names) != 0 {
		t.Errorf("a refused load left %+v peers and NIXL names %v", r, a.names)
	}
}

// TestUnloadParks: the last UnloadPeers of an agent keeps its NIXL state
// (names.go says why), a new load of it reuses that state, and no more
// than maxParked agents stay parked.
func TestUnloadParks(t *testing.T) {
	defer func(n int) { maxParked = n }(maxParked)
	maxParked = 2
	a, _ := openAgent(t, "park-a")
	var mds [][]byte
	var regions []sdk.RegionID
	for i := range 4 {
		p, md := openAgent(t, fmt.Sprintf("park-%d", i))
		mds = append(mds, md)
		regions = append(regions, agentRegion[p])
	}
	id, err := load(t, a, "park-0", mds[0])
	if err != nil {
		t.Fatal(err)
	}
	use(t, a, id, regions[0])
	id2, err := load(t, a, "park-0", mds[0])
	if err != nil || a.names["park-0"].refs != 2 {
		t.Fatalf("second load of one agent: %v, refs %+v", err, a.names["park-0"])
	}
	unload(t, a, id2)
	unload(t, a, id)
	if ref := a.names["park-0"]; ref == nil || ref.refs != 0 || ref.parked == 0 {
		t.Fatalf("after its last unload park-0 is %+v, want parked", ref)
	}
	if id, err = load(t, a, "park-0", mds[0]); err != nil || a.names["park-0"].parked != 0 {
		t.Fatalf("reload of a parked agent: %v, %+v", err, a.names["park-0"])
	}
	unload(t, a, id)
	for i := 1; i < 4; i++ {
		id, err := load(t, a, fmt.Sprintf("park-%d", i), mds[i])
		if err != nil {
			t.Fatal(err)
		}
		use(t, a, id, regions[i])
		unload(t, a, id)
	}
	if len(a.names) != maxParked {
		t.Fatalf("%d agents parked, want the newest %d: %v", len(a.names), maxParked, a.names)
	}
	for _, gone := range []string{"park-0", "park-1"} {
		if a.names[gone] != nil {
			t.Errorf("%s, the longest parked, was not invalidated", gone)
		}
	}
}
