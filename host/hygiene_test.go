package host

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	enginev1 "github.com/custody-dev/custody/api/engine/v1"
	"github.com/custody-dev/custody/client"
)

// TestConfigNamesTheFieldOfEveryMistake: no silent default transport, and
// paths that do not exist, names too long or unfit for a directory, each
// named by field.
func TestConfigNamesTheFieldOfEveryMistake(t *testing.T) {
	dir := t.TempDir()
	base := "engine: {socket: " + filepath.Join(dir, "e.sock") + "}\n"
	for _, c := range []struct{ name, yaml, want string }{
		{"no transport", "name: a\n" + base, "config: transport: required"},
		{"missing plugin", "name: a\n" + base + "transport: {path: " + filepath.Join(dir, "nope") + "}", "config: transport.path: stat " + filepath.Join(dir, "nope")},
		{"plugin not executable", "name: a\n" + base + "transport: {path: " + dir + "}", "config: transport.path: " + dir + " is not an executable file"},
		{"missing socket directory", "name: a\ntransport: {name: fake}\nengine: {socket: " + filepath.Join(dir, "no", "e.sock") + "}", "config: engine.socket: its directory"},
		{"name too long", "name: " + strings.Repeat("n", MaxNameBytes+1) + "\ntransport: {name: fake}\n" + base, "config: name: 257 bytes long"},
		{"name with a slash", "name: ../evil\ntransport: {name: fake}\n" + base, "config: name: \"../evil\""},
		{"pool name too long", "name: a\ntransport: {name: fake}\n" + base + "pools: [{name: " + strings.Repeat("p", MaxNameBytes+1) + ", path: /x, block_size: 1, blocks: 1}]", "config: pools[0].name: 257 bytes long"},
		{"peer name too long", "name: a\ntransport: {name: fake}\n" + base + "peers: [{name: " + strings.Repeat("p", MaxNameBytes+1) + ", address: 'x:1'}]", "config: peers[0].name: 257 bytes long"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(c.yaml))
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.Less(t, len(err.Error()), 2048, "the error repeats a huge value")
		})
	}
	ok := "name: " + strings.Repeat("n", MaxNameBytes) + "\ntransport: {name: fake}\n" + base
	_, err := ParseConfig([]byte(ok))
	assert.NoError(t, err, "a name of exactly %d bytes", MaxNameBytes)
}

// TestEngineAPILimitsNamesAndIDs: a request id, peer or pool name longer
// than MaxNameBytes is INVALID_ARGUMENT, and a 1 MiB one is not repeated
// in the error.
func TestEngineAPILimitsNamesAndIDs(t *testing.T) {
	th := startHost(t, "names", 8, nil)
	conn, err := grpc.NewClient("unix://"+th.cfg.Engine.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	api := enginev1.NewEngineClient(conn)
	blocks, err := th.c.Alloc(th.ctx(), th.poolID, 2)
	require.NoError(t, err)
	send := func(id string, b uint32) error {
		_, err := api.ExpectSend(th.ctx(), &enginev1.ExpectSendRequest{RequestId: id, Token: 1, Pool: th.poolID, Blocks: []uint32{b}, Consumers: 1, LeaseMs: 1000})
		return err
	}
	require.NoError(t, send(strings.Repeat("r", MaxNameBytes), blocks[0]))
	huge := strings.Repeat("x", 1<<20)
	for name, call := range map[string]func() error{
		"request_id 257": func() error { return send(strings.Repeat("r", MaxNameBytes+1), blocks[1]) },
		"request_id":     func() error { return send(huge, blocks[1]) },
		"peer": func() error {
			_, err := api.ExpectSend(th.ctx(), &enginev1.ExpectSendRequest{RequestId: "p", Token: 1, Peer: huge, Pool: th.poolID, Blocks: blocks[1:], Consumers: 1, LeaseMs: 1000})
			return err
		},
		"name": func() error {
			_, err := api.ConnectPeer(th.ctx(), &enginev1.ConnectPeerRequest{Name: huge, Ranks: []*enginev1.RemoteRank{{Address: "a:1", Pool: "kv"}}})
			return err
		},
		"address": func() error {
			_, err := api.ConnectPeer(th.ctx(), &enginev1.ConnectPeerRequest{Name: "p", Ranks: []*enginev1.RemoteRank{{Address: huge, Pool: "kv"}}})
			return err
		},
		"pool name": func() error {
			_, err := api.RegisterPool(th.ctx(), &enginev1.RegisterPoolRequest{Name: huge, Path: th.pool, BlockSize: 1, Blocks: 1})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			err := call()
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%.200v", err)
			msg := status.Convert(err).Message()
			assert.Contains(t, msg, strings.Fields(name)[0])
			assert.Less(t, len(msg), 1024, "the error repeats the huge value")
		})
	}
}

// TestLinkWhoseHandshakeFailedLeavesStatus: a peer that could not be
// reached is not listed once its handshake failed (the link is kept: the
// next request for the peer tries again).
func TestLinkWhoseHandshakeFailedLeavesStatus(t *testing.T) {
	th := startHost(t, "lonely", 8, nil)
	require.NoError(t, th.c.ConnectPeer(th.ctx(), "ghost", client.RemoteRank{Address: loopbackPort(t), Pool: "kv"}))
	dst, err := th.c.Alloc(th.ctx(), th.poolID, 1)
	require.NoError(t, err)
	th.readOrRefused("r1", client.Part{Pool: th.poolID, Local: dst, Remote: []uint32{0}}, "ghost")
	st, err := th.c.Status(th.ctx())
	require.NoError(t, err)
	assert.NotContains(t, st.Peers, "ghost")
}

// TestKilledTransportLeavesNoFiles: a transport killed (SIGKILL: it cannot
// clean up) leaves neither its go-plugin socket nor the fake's lease files
// once the host started the next one, and a stopped host leaves none.
func TestKilledTransportLeavesNoFiles(t *testing.T) {
	var sockets, dir string
	leftovers := func() (socks, leases []string) {
		entries, err := os.ReadDir(sockets)
		if !os.IsNotExist(err) { // a stopped host removes the empty directory
			require.NoError(t, err)
		}
		for _, e := range entries {
			socks = append(socks, e.Name())
		}
		entries, err = os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "custody-fake-") {
				leases = append(leases, e.Name())
			}
		}
		return socks, leases
	}
	t.TempDir()        // its removal is registered first, so it runs after the check below
	t.Cleanup(func() { // runs after the host's own cleanup stopped it
		socks, leases := leftovers()
		assert.Empty(t, socks, "sockets after the host stopped")
		assert.Empty(t, leases, "lease files after the host stopped")
	})
	th := startHost(t, "tidy", 8, nil)
	dir = th.cfg.Transport.Params["dir"]
	sockets = SocketParent(th.cfg.StateDir, "tidy")
	socks, leases := leftovers()
	require.Len(t, socks, 1)
	require.Len(t, leases, 1)

	st, err := th.c.Status(th.ctx())
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(int(st.TransportPid), syscall.SIGKILL))
	deadline := time.Now().Add(30 * time.Second)
	for {
		now, err := th.c.Status(th.ctx())
		require.NoError(t, err)
		if now.Fences >= 1 && now.TransportPid != 0 && now.TransportPid != st.TransportPid {
			break
		}
		require.True(t, time.Now().Before(deadline), "no restart within 30s")
		time.Sleep(5 * time.Millisecond) // polling the host's status for the restart
	}
	socks2, leases2 := leftovers()
	assert.Len(t, socks2, 1, "only the new transport's socket directory")
	assert.False(t, slices.Contains(socks2, socks[0]), "the killed transport's socket directory is gone")
	assert.Len(t, leases2, 1, "only the new agent's lease files")
	assert.False(t, slices.Contains(leases2, leases[0]), "the killed agent's lease files are gone")
}
