package host

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMetadataServerServesCurrentInfo(t *testing.T) {
	pools := []PoolLayout{{Name: "kv", BlockSize: 4096, Blocks: 8, Region: 3}}
	var epoch atomic.Uint64
	epoch.Store(1)
	srv, err := ServeMetadata("127.0.0.1:0", func() (PeerInfo, error) {
		return PeerInfo{Name: "p", Transport: "fake", ContractMajor: 1, Epoch: epoch.Load(),
			Metadata: []byte{1, 2, 3}, Pools: pools, Compat: CompatHash("fake", 1, pools)}, nil
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.Close()) }()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pi, err := FetchPeerInfo(ctx, srv.Addr())
	require.NoError(t, err)
	assert.Equal(t, []byte{1, 2, 3}, pi.Metadata)
	assert.Equal(t, pools, pi.Pools)
	assert.NoError(t, pi.CheckCompat(CompatHash("fake", 1, pools)))

	epoch.Store(2) // served per request, so a fenced host publishes its new epoch
	pi, err = FetchPeerInfo(ctx, srv.Addr())
	require.NoError(t, err)
	assert.Equal(t, uint64(2), pi.Epoch)
}

func TestMetadataServerReportsUnavailableInfo(t *testing.T) {
	srv, err := ServeMetadata("127.0.0.1:0", func() (PeerInfo, error) {
		return PeerInfo{}, errors.New("transport restarting")
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.Close()) }()
	_, err = FetchPeerInfo(context.Background(), srv.Addr())
	assert.ErrorContains(t, err, "transport restarting")
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
