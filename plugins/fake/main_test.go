package fake

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/custody-dev/custody/sdk"
)

func TestMain(m *testing.M) {
	if os.Getenv(peerEnv) != "" {
		os.Exit(runPeer(os.Getenv(peerEnv)))
	}
	goleak.VerifyTestMain(m)
}

// wait bounds every wait on the engine in these tests.
const wait = 10 * time.Second

var ctx = context.Background()

// open returns an open agent named name whose lease files live in a test
// directory, closed (and checked empty) when the test ends.
func open(t testing.TB, name string, params map[string]string) *Transport {
	t.Helper()
	if params == nil {
		params = map[string]string{}
	}
	if _, ok := params["dir"]; !ok {
		params["dir"] = t.TempDir()
	}
	if _, ok := params["peer_dirs"]; !ok {
		params["peer_dirs"] = os.TempDir() // where the tests' region and lease files are
	}
	a := New()
	require.NoError(t, a.Open(ctx, sdk.OpenRequest{Agent: name, Params: params}))
	t.Cleanup(func() {
		res, err := a.Resources(ctx)
		if err == nil && !res.Zero() {
			t.Errorf("agent %s still holds %+v at the end of the test", name, res)
		}
		_ = a.Close(ctx)
	})
	return a
}

// regionFile creates a region file of size bytes filled with seeded random
// data, removed when the test ends.
func regionFile(t testing.TB, size int, seed uint64) string {
	t.Helper()
	path, err := NewRegionFile(t.TempDir(), size)
	require.NoError(t, err)
	if seed != 0 {
		require.NoError(t, os.WriteFile(path, randomBytes(size, seed), 0o600))
	}
	return path
}

// randomBytes returns n seeded random bytes.
func randomBytes(n int, seed uint64) []byte {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	b := make([]byte, n)
	_, _ = rand.NewChaCha8(key).Read(b)
	return b
}

// register registers one region and returns its id.
func register(t testing.TB, a *Transport, r sdk.Region) sdk.RegionID {
	t.Helper()
	regs, err := a.RegisterMemory(ctx, []sdk.Region{r})
	require.NoError(t, err)
	require.NoError(t, regs[0].Err)
	require.NotZero(t, regs[0].ID)
	return regs[0].ID
}

// loadPeer loads peer's current metadata into a and returns the peer id.
func loadPeer(t testing.TB, a, peer *Transport) sdk.PeerID {
	t.Helper()
	md, err := peer.LocalMetadata(ctx)
	require.NoError(t, err)
	res, err := a.LoadPeers(ctx, []sdk.PeerSpec{{Name: peer.agent, Metadata: md}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	return res[0].ID
}

// prepare prepares one dlist and returns its id.
func prepare(t testing.TB, a *Transport, peer sdk.PeerID, descs ...sdk.Descriptor) sdk.DlistID {
	t.Helper()
	res, err := a.PrepareDescriptors(ctx, []sdk.DlistSpec{{Peer: peer, Descriptors: descs}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	return res[0].ID
}

// postOne posts one transfer and returns its handle.
func postOne(t testing.TB, a *Transport, spec sdk.PostSpec) sdk.HandleID {
	t.Helper()
	res, err := a.Post(ctx, []sdk.PostSpec{spec})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	return res[0].ID
}

// poll returns one handle's status.
func poll(t testing.TB, a *Transport, id sdk.HandleID) sdk.HandleStatus {
	t.Helper()
	st, err := a.Poll(ctx, []sdk.HandleID{id})
	require.NoError(t, err)
	return st[0]
}

// terminal polls a handle until it is terminal and returns its status.
func terminal(t testing.TB, a *Transport, id sdk.HandleID) sdk.HandleStatus {
	t.Helper()
	var st sdk.HandleStatus
	require.Eventually(t, func() bool {
		st = poll(t, a, id)
		return st.Err == nil && st.State.Terminal()
	}, wait, 100*time.Microsecond, "handle %d never turned terminal", id)
	return st
}

// release releases handles and requires success.
func release(t testing.TB, a *Transport, ids ...sdk.HandleID) {
	t.Helper()
	errs, err := a.Release(ctx, ids)
	require.NoError(t, err)
	for _, e := range errs {
		require.NoError(t, e)
	}
}

// pair is agent a set up to transfer with agent b: one region each, b
// loaded into a, a local dlist over a's region and a remote one over b's.
type pair struct {
	a, b          *Transport
	aPath, bPath  string
	aRegion       sdk.RegionID
	bRegion       sdk.RegionID
	peer          sdk.PeerID
	local, remote sdk.DlistID
	size          int
}

// newPair builds a pair with regions of size bytes of distinct random data.
// Its teardown releases everything in order.
func newPair(t testing.TB, size int, aParams, bParams map[string]string) *pair {
	t.Helper()
	p := &pair{size: size}
	p.a = open(t, "a", aParams)
	p.b = open(t, "b", bParams)
	p.aPath, p.bPath = regionFile(t, size, 1), regionFile(t, size, 2)
	p.aRegion = register(t, p.a, sdk.Region{Path: p.aPath, Length: uint64(size)})
	p.bRegion = register(t, p.b, sdk.Region{Path: p.bPath, Length: uint64(size)})
	p.peer = loadPeer(t, p.a, p.b)
	p.local = prepare(t, p.a, 0, sdk.Descriptor{Region: p.aRegion, Length: uint64(size)})
	p.remote = prepare(t, p.a, p.peer, sdk.Descriptor{Region: p.bRegion, Length: uint64(size)})
	t.Cleanup(func() { p.teardown(t) })
	return p
}

// teardown releases the pair's dlists, peer and regions, ignoring what a
// test already released.
func (p *pair) teardown(t testing.TB) {
	_, _ = p.a.ReleaseDescriptors(ctx, []sdk.DlistID{p.local, p.remote})
	_, _ = p.a.UnloadPeers(ctx, []sdk.PeerID{p.peer})
	_, _ = p.a.DeregisterMemory(ctx, []sdk.RegionID{p.aRegion})
	_, _ = p.b.DeregisterMemory(ctx, []sdk.RegionID{p.bRegion})
}

// whole posts op over the pair's whole regions.
func (p *pair) whole(op sdk.Op, note []byte) sdk.PostSpec {
	return sdk.PostSpec{Op: op, Local: p.local, LocalIndices: []uint32{0}, Remote: p.remote, RemoteIndices: []uint32{0}, Notification: note}
}

// readFile returns a region file's bytes.
func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}
