package group

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/host/group/ledger"
)

var compat = strings.Repeat("ab", 32)

// TestPeerDirectory: a host is found by name while it lives; its name is
// its own; records are validated.
func TestPeerDirectory(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	p := PeerAddress{Name: "prefill-0", MetadataAddr: "127.0.0.1:7001", Compat: compat}
	require.NoError(t, c.ranks[0].Publish(ctxT(t), p))
	got, err := c.ranks[1].Lookup(ctxT(t), "prefill-0")
	require.NoError(t, err)
	assert.Equal(t, p, got)

	// Republishing our own name updates it; another host cannot take it.
	p.MetadataAddr = "127.0.0.1:7002"
	require.NoError(t, c.ranks[0].Publish(ctxT(t), p))
	got, err = c.ranks[1].Lookup(ctxT(t), "prefill-0")
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:7002", got.MetadataAddr)
	require.ErrorIs(t, c.ranks[1].Publish(ctxT(t), p), ErrPeerNameTaken)

	_, err = c.ranks[0].Lookup(ctxT(t), "nobody")
	require.ErrorIs(t, err, ErrPeerNotFound)
	require.ErrorIs(t, c.ranks[0].Publish(ctxT(t), PeerAddress{Name: "x", MetadataAddr: "nohost", Compat: compat}), ErrBadArgument)
	require.ErrorIs(t, c.ranks[0].Publish(ctxT(t), PeerAddress{Name: "x", MetadataAddr: "h:1", Compat: "zz"}), ErrBadArgument)

	_, err = c.client().Put(ctxT(t), ledger.PeerKey("bad"), `{"name":"bad","metadata_addr":"/etc/passwd","compat":"`+compat+`"}`)
	require.NoError(t, err)
	_, err = c.ranks[0].Lookup(ctxT(t), "bad")
	require.ErrorIs(t, err, ErrMalformed)

	// The entry goes with its host.
	require.NoError(t, c.ranks[1].Publish(ctxT(t), PeerAddress{Name: "decode-1", MetadataAddr: "127.0.0.1:7003", Compat: compat}))
	require.NoError(t, c.ranks[1].Close())
	_, err = c.ranks[0].Lookup(ctxT(t), "decode-1")
	require.ErrorIs(t, err, ErrPeerNotFound)
}

// TestEngineDirectory: the ranks of an engine are found by the engine's
// name, in rank order, with their host names; a rank not published is
// named in the error.
func TestEngineDirectory(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	require.NoError(t, c.ranks[1].Publish(ctxT(t), PeerAddress{Name: EngineRankName("pre", 1, 2), MetadataAddr: "127.0.0.1:2", Compat: compat, Host: "pre-1"}))
	_, err := c.ranks[0].LookupEngine(ctxT(t), "pre")
	require.ErrorIs(t, err, ErrPeerNotFound)
	require.ErrorContains(t, err, "rank 0 of 2 is not published")
	require.NoError(t, c.ranks[0].Publish(ctxT(t), PeerAddress{Name: EngineRankName("pre", 0, 2), MetadataAddr: "127.0.0.1:1", Compat: compat, Host: "pre-0"}))
	got, err := c.ranks[1].LookupEngine(ctxT(t), "pre")
	require.NoError(t, err)
	require.Len(t, got, 2)
	for r, p := range got {
		require.Equal(t, fmt.Sprintf("pre-%d", r), p.Host)
		require.Equal(t, fmt.Sprintf("127.0.0.1:%d", r+1), p.MetadataAddr)
	}
	_, err = c.ranks[0].LookupEngine(ctxT(t), "other")
	require.ErrorIs(t, err, ErrPeerNotFound)
}
