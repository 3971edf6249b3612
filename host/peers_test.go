package host

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/custody-dev/custody/client"
)

func TestRemovedAndReconnectedPeerGetsNoStaleCompletion(t *testing.T) {
	prefill := startHost(t, "prefill", 32, nil)
	decode := startHost(t, "decode", 32, nil, slow...)
	decode.connect("prefill", prefill)

	_, dst1 := pull(t, prefill, decode, "old", 8)
	require.Eventually(t, func() bool {
		st, err := decode.c.Status(decode.ctx())
		return err == nil && st.InFlight > 0
	}, 10*time.Second, time.Millisecond)
	require.NoError(t, decode.c.RemovePeer(decode.ctx(), "prefill"))
	decode.connect("prefill", prefill)
	src, dst2 := pull(t, prefill, decode, "new", 2)

	f := decode.waitFinished("old", "new")
	assert.Equal(t, []string{"old"}, failedIDs(f), "only the removed session's request fails")
	assert.ElementsMatch(t, []string{"old", "new"}, f.FinishedRecving)
	assert.ElementsMatch(t, refsOf(decode.poolID, dst1), f.InvalidBlocks, "the old request's blocks, and only those, are invalid")
	sameBlocks(t, src, decode.read(dst2), "new")
}

func TestHandshakeFailingAtTheSecondRankLeavesNothingBehind(t *testing.T) {
	prefill := startHost(t, "prefill", 16, nil)
	// Each handshake loads two ranks: fail the second of every one.
	decode := startHost(t, "decode", 16, nil, "fault", "load-peer-fail,rank=1;load-peer-fail,rank=3;load-peer-fail,rank=5")
	addr := prefill.h.MetadataAddr()
	require.NoError(t, decode.c.ConnectPeer(decode.ctx(), "prefill",
		client.RemoteRank{Address: addr, Pool: "kv"}, client.RemoteRank{Address: addr, Pool: "kv"}))

	pb, err := prefill.c.Alloc(prefill.ctx(), prefill.poolID, 2)
	require.NoError(t, err)
	dst, err := decode.c.Alloc(decode.ctx(), decode.poolID, 2)
	require.NoError(t, err)
	assert.Contains(t, decode.readOrRefused("r1", client.Part{Pool: decode.poolID, Local: dst, Remote: pb}), "rank 1")

	st, err := decode.c.Status(decode.ctx())
	require.NoError(t, err)
	assert.Zero(t, st.Journal, "no handshake acquisition is left in the journal")
	assert.Zero(t, st.NativePeers, "the first rank's peer was rolled back")
	assert.Equal(t, uint64(1), st.NativeDlists, "only the pool's own dlist remains")
	assert.Zero(t, st.NativeHandles)
}

func TestIncompatiblePeerIsRefusedBeforeAnyTransfer(t *testing.T) {
	prefill := startHost(t, "prefill", 16, nil)
	decode := startHost(t, "decode", 16, nil)
	// A pool prefill lacks makes decode's compatibility hash differ.
	extra, err := os.CreateTemp(t.TempDir(), "extra")
	require.NoError(t, err)
	require.NoError(t, extra.Truncate(1<<20))
	require.NoError(t, extra.Close())
	_, err = decode.c.RegisterPool(decode.ctx(), "other", extra.Name(), 0, 4096, 16)
	require.NoError(t, err)
	decode.connect("prefill", prefill)

	pb, err := prefill.c.Alloc(prefill.ctx(), prefill.poolID, 2)
	require.NoError(t, err)
	dst, err := decode.c.Alloc(decode.ctx(), decode.poolID, 2)
	require.NoError(t, err)
	refused := decode.readOrRefused("r1", client.Part{Pool: decode.poolID, Local: dst, Remote: pb})
	assert.Contains(t, refused, "incompatible")
	st, err := decode.c.Status(decode.ctx())
	require.NoError(t, err)
	assert.Zero(t, st.NativePeers, "the peer was never loaded")
	assert.Zero(t, st.NativeHandles, "nothing was posted")
}

func TestEngineSocketRefusesClientsWhenPermissionsAreLoosened(t *testing.T) {
	th := startHost(t, "solo", 4, nil)
	st, err := os.Stat(th.cfg.Engine.Socket)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the socket is born 0600")

	require.NoError(t, os.Chmod(th.cfg.Engine.Socket, 0o666))
	c, err := client.Dial(th.cfg.Engine.Socket)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Status(th.ctx())
	assert.Equal(t, codes.Unavailable, status.Code(err), "a loosened socket refuses connections: %v", err)

	require.NoError(t, os.Chmod(th.cfg.Engine.Socket, 0o600))
	c2, err := client.Dial(th.cfg.Engine.Socket)
	require.NoError(t, err)
	defer c2.Close()
	_, err = c2.Status(th.ctx())
	assert.NoError(t, err, "restored permissions serve again")
}

func TestInvalidEngineCallsChangeNothing(t *testing.T) {
	th := startHost(t, "solo", 4, nil)
	peer := startHost(t, "peer", 4, nil)
	th.connect("peer", peer)
	mine, err := th.c.Alloc(th.ctx(), th.poolID, 2)
	require.NoError(t, err)

	cases := []struct {
		name string
		call func() error
		want string
	}{
		{"unknown pool", func() error { _, err := th.c.Alloc(th.ctx(), 99, 1); return err }, "pool"},
		{"block out of range", func() error {
			return th.c.Read(th.ctx(), "x1", 0, "peer", false, client.Part{Pool: th.poolID, Local: []uint32{mine[0], 4}, Remote: []uint32{0, 1}})
		}, "4"},
		{"duplicated blocks", func() error {
			return th.c.Read(th.ctx(), "x2", 0, "peer", false, client.Part{Pool: th.poolID, Local: []uint32{mine[0], mine[0]}, Remote: []uint32{0, 1}})
		}, "twice"},
		{"block not the engine's", func() error {
			free := []uint32{0, 1, 2, 3}
			for _, b := range mine {
				free = remove(free, b)
			}
			return th.c.ExpectSend(th.ctx(), "x3", 1, "", th.poolID, free[:1], 1, time.Second)
		}, "engine"},
		{"unknown peer", func() error {
			return th.c.Read(th.ctx(), "x4", 0, "nobody", false, client.Part{Pool: th.poolID, Local: mine[:1], Remote: []uint32{0}})
		}, "nobody"},
		{"remove unknown peer", func() error { return th.c.RemovePeer(th.ctx(), "nobody") }, "nobody"},
		{"empty request id", func() error {
			return th.c.ExpectSend(th.ctx(), "", 1, "", th.poolID, mine[:1], 1, time.Second)
		}, "empty"},
		{"zero consumers", func() error {
			return th.c.ExpectSend(th.ctx(), "x5", 1, "", th.poolID, mine[:1], 0, time.Second)
		}, "consumers"},
		{"no notification token", func() error {
			return th.c.ExpectSend(th.ctx(), "x6", 0, "", th.poolID, mine[:1], 1, time.Second)
		}, "Token"},
		{"free a block the engine does not hold", func() error { return th.c.Free(th.ctx(), th.poolID, []uint32{3, 3}) }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.Error(t, err)
			assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), tc.want)
			st, serr := th.c.Status(th.ctx())
			require.NoError(t, serr)
			assert.Zero(t, st.Requests, "no request was recorded")
			assert.Zero(t, st.NativeHandles, "nothing was posted")
		})
	}
	// The engine still holds exactly its two blocks: all others are free.
	rest, err := th.c.Alloc(th.ctx(), th.poolID, 2)
	require.NoError(t, err)
	assert.ElementsMatch(t, remove(remove([]uint32{0, 1, 2, 3}, mine[0]), mine[1]), rest)
}

func remove(s []uint32, x uint32) []uint32 {
	out := s[:0:0]
	for _, v := range s {
		if v != x {
			out = append(out, v)
		}
	}
	return out
}
