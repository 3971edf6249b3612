package ucx

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

func TestParseParams(t *testing.T) {
	t.Setenv("UCX_TLS", "")
	cases := []struct {
		name    string
		params  map[string]string
		tls     string
		errPeer bool
		code    sdk.Code
	}{
		{name: "default is tcp in peer mode", tls: "tcp", errPeer: true},
		{name: "tcp", params: map[string]string{"tls": "tcp"}, tls: "tcp", errPeer: true},
		{name: "shared memory has no peer mode", params: map[string]string{"tls": "posix,sysv,cma"}, tls: "posix,sysv,cma"},
		{name: "any shm transport turns peer mode off", params: map[string]string{"tls": "tcp,cma"}, tls: "tcp,cma"},
		{name: "UCX setting passes through", params: map[string]string{"tls": "tcp", "UCX_TCP_KEEPIDLE": "5"}, tls: "tcp", errPeer: true},
		{name: "empty tls", params: map[string]string{"tls": " "}, code: sdk.CodeInvalidArgument},
		{name: "UCX_TLS must be tls", params: map[string]string{"UCX_TLS": "tcp"}, code: sdk.CodeInvalidArgument},
		{name: "unknown key", params: map[string]string{"speed": "fast"}, code: sdk.CodeInvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := parseParams(c.params)
			if c.code != sdk.CodeOK {
				require.Error(t, err)
				assert.Equal(t, c.code, sdk.CodeOf(err))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.tls, cfg.tls)
			assert.Equal(t, c.errPeer, cfg.errPeer)
			assert.Equal(t, !c.errPeer, cfg.watchPeers, "a peer UCX cannot report must be watched")
			assert.Equal(t, describe(cfg).PeerLoss == sdk.PeerLossReported, c.errPeer)
		})
	}
}

func TestParamsEnvDefault(t *testing.T) {
	t.Setenv("UCX_TLS", "posix,sysv,cma")
	cfg, err := parseParams(nil)
	require.NoError(t, err)
	assert.Equal(t, "posix,sysv,cma", cfg.tls)
	assert.False(t, cfg.errPeer)
}

// The TCP segment sizes are set unless a parameter or the environment
// sets them; a parameter wins over the default, the environment's value is
// left for UCX to read.
func TestParamsTCPSegments(t *testing.T) {
	t.Setenv("UCX_TCP_TX_SEG_SIZE", "")
	t.Setenv("UCX_TCP_RX_SEG_SIZE", "")
	cfg, err := parseParams(nil)
	require.NoError(t, err)
	assert.Equal(t, "256k", cfg.ucx["TCP_TX_SEG_SIZE"])
	assert.Equal(t, "256k", cfg.ucx["TCP_RX_SEG_SIZE"])
	keys, vals := cfg.settings()
	assert.Equal(t, []string{"TLS", "TCP_RX_SEG_SIZE", "TCP_TX_SEG_SIZE"}, keys)
	assert.Equal(t, []string{"tcp", "256k", "256k"}, vals)

	cfg, err = parseParams(map[string]string{"UCX_TCP_TX_SEG_SIZE": "8k"})
	require.NoError(t, err)
	assert.Equal(t, "8k", cfg.ucx["TCP_TX_SEG_SIZE"], "the parameter wins")
	assert.Equal(t, "256k", cfg.ucx["TCP_RX_SEG_SIZE"])

	t.Setenv("UCX_TCP_RX_SEG_SIZE", "64k")
	cfg, err = parseParams(nil)
	require.NoError(t, err)
	assert.NotContains(t, cfg.ucx, "TCP_RX_SEG_SIZE", "the environment's value stays UCX's to read")
	assert.Equal(t, "256k", cfg.ucx["TCP_TX_SEG_SIZE"])
}
