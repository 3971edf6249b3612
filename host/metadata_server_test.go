package host

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// trustOf is the one-machine trust of host name in stateDir.
func trustOf(t *testing.T, stateDir, name string) *peerTrust {
	t.Helper()
	tr, err := localTrust(stateDir, name)
	require.NoError(t, err)
	return tr
}

func TestMetadataServerServesCurrentInfo(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	pools := []PoolLayout{{Name: "kv", BlockSize: 4096, Blocks: 8, Region: 3}}
	var epoch atomic.Uint64
	epoch.Store(1)
	srv, err := ServeMetadata("127.0.0.1:0", trustOf(t, state, "p").serverTLS(), func() (PeerInfo, error) {
		return PeerInfo{Name: "p", Transport: "fake", ContractMajor: 1, Epoch: epoch.Load(),
			Metadata: []byte{1, 2, 3}, Pools: pools, Compat: CompatHash("fake", 1, pools)}, nil
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.Close()) }()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	q := trustOf(t, state, "q")
	pi, err := FetchPeerInfo(ctx, srv.Addr(), "p", q.clientTLS("p"))
	require.NoError(t, err)
	assert.Equal(t, []byte{1, 2, 3}, pi.Metadata)
	assert.Equal(t, pools, pi.Pools)
	assert.NoError(t, pi.CheckCompat(CompatHash("fake", 1, pools)))

	epoch.Store(2) // served per request, so a fenced host publishes its new epoch
	pi, err = FetchPeerInfo(ctx, srv.Addr(), "p", q.clientTLS("p"))
	require.NoError(t, err)
	assert.Equal(t, uint64(2), pi.Epoch)
}

func TestMetadataServerReportsUnavailableInfo(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	srv, err := ServeMetadata("127.0.0.1:0", trustOf(t, state, "p").serverTLS(), func() (PeerInfo, error) {
		return PeerInfo{}, errors.New("transport restarting")
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.Close()) }()
	_, err = FetchPeerInfo(context.Background(), srv.Addr(), "p", trustOf(t, state, "q").clientTLS("p"))
	assert.ErrorContains(t, err, "transport restarting")
}

// TestForgedPeersAreRefused: whoever answers at a peer's address is
// believed only when it proves, with a certificate from this cluster's CA,
// that it is the peer asked for; and a client without such a certificate
// learns nothing.
func TestForgedPeersAreRefused(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	other := filepath.Join(t.TempDir(), "elsewhere") // another CA
	q := trustOf(t, state, "q")
	info := func(name string) func() (PeerInfo, error) {
		return func() (PeerInfo, error) { return PeerInfo{Name: name, Compat: "c"}, nil }
	}
	serve := func(tc *tls.Config, f func() (PeerInfo, error)) string {
		srv, err := ServeMetadata("127.0.0.1:0", tc, f)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, srv.Close()) })
		return srv.Addr()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Run("a certificate from another CA", func(t *testing.T) {
		addr := serve(trustOf(t, other, "p").serverTLS(), info("p"))
		_, err := FetchPeerInfo(ctx, addr, "p", q.clientTLS("p"))
		assert.ErrorContains(t, err, "not from this cluster's CA")
	})
	t.Run("a certificate naming another peer", func(t *testing.T) {
		addr := serve(trustOf(t, state, "mallory").serverTLS(), info("p"))
		_, err := FetchPeerInfo(ctx, addr, "p", q.clientTLS("p"))
		assert.ErrorContains(t, err, `peer certificate names host "mallory", not "p"`)
	})
	t.Run("metadata naming another peer", func(t *testing.T) {
		addr := serve(trustOf(t, state, "p").serverTLS(), info("mallory"))
		_, err := FetchPeerInfo(ctx, addr, "p", q.clientTLS("p"))
		assert.ErrorContains(t, err, `it calls itself "mallory", not "p"`)
	})
	t.Run("no TLS at all", func(t *testing.T) {
		plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(`{"name":"p","compat":"c"}`))
		}))
		defer plain.Close()
		_, err := FetchPeerInfo(ctx, plain.Listener.Addr().String(), "p", q.clientTLS("p"))
		assert.Error(t, err)
	})
	t.Run("a redirect", func(t *testing.T) {
		target := serve(trustOf(t, state, "p").serverTLS(), info("p")) // genuine, but not asked
		p := trustOf(t, state, "p")
		ln, err := tls.Listen("tcp", "127.0.0.1:0", p.serverTLS())
		require.NoError(t, err)
		srv := &http.Server{Handler: http.RedirectHandler("https://"+target+metadataPath, http.StatusFound), ReadHeaderTimeout: time.Second}
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(ln) }()
		defer func() { _ = srv.Close(); <-done }()
		_, err = FetchPeerInfo(ctx, ln.Addr().String(), "p", q.clientTLS("p"))
		assert.ErrorIs(t, err, ErrRedirect)
	})
	t.Run("a client without a certificate learns nothing", func(t *testing.T) {
		var asked atomic.Int32
		addr := serve(trustOf(t, state, "p").serverTLS(), func() (PeerInfo, error) {
			asked.Add(1)
			return PeerInfo{Name: "p", Compat: "c"}, nil
		})
		anon := q.clientTLS("p")
		anon.Certificates = nil
		_, err := FetchPeerInfo(ctx, addr, "p", anon)
		assert.ErrorContains(t, err, "certificate required")
		wrongCA := trustOf(t, other, "q").clientTLS("p")
		wrongCA.VerifyConnection = nil // it does not check the server: the server must check it
		_, err = FetchPeerInfo(ctx, addr, "p", wrongCA)
		assert.Error(t, err)
		assert.Zero(t, asked.Load(), "the endpoint answered a client it cannot authenticate")
	})
}

// TestTheLocalCAIsPrivate: the one-machine CA lives in a 0700 directory,
// its key 0600, and every host sharing the state directory shares it.
func TestTheLocalCAIsPrivate(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	a, b := trustOf(t, state, "a"), trustOf(t, state, "b")
	st, err := os.Stat(filepath.Join(state, "ca"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())
	st, err = os.Stat(filepath.Join(state, "ca", "ca-key.pem"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	assert.True(t, a.ca.Equal(b.ca), "one CA for the hosts of one state directory")
}

func TestMetadataListensOnLoopbackByDefault(t *testing.T) {
	c, err := ParseConfig([]byte("name: a\nengine: {socket: /s}\ntransport: {name: fake}\n"))
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:0", c.Metadata.Listen)
}

func TestCompatHashDiffersOnEveryInput(t *testing.T) {
	base := []PoolLayout{{Name: "kv", BlockSize: 4096}}
	h := CompatHash("fake", 1, base)
	assert.Equal(t, h, CompatHash("fake", 1, []PoolLayout{{Name: "kv", BlockSize: 4096, Blocks: 99, Region: 7}}),
		"block count and region id are not part of compatibility")
	assert.NotEqual(t, h, CompatHash("ucx", 1, base))
	assert.NotEqual(t, h, CompatHash("fake", 2, base))
	assert.NotEqual(t, h, CompatHash("fake", 1, []PoolLayout{{Name: "kv", BlockSize: 8192}}))

	err := PeerInfo{Name: "d", Compat: CompatHash("ucx", 1, base)}.CheckCompat(h)
	assert.ErrorContains(t, err, `peer "d" is incompatible`)
}
