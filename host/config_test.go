package host

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const goodConfig = `
name: prefill-0
transport:
  name: fake
  params: {seed: "7"}
pools:
  - {name: kv, path: /dev/shm/kv, block_size: 4096, blocks: 16}
peers:
  - {name: decode-0, address: "127.0.0.1:7001"}
engine: {socket: /tmp/custody.sock}
`

func TestParseConfigFillsDefaults(t *testing.T) {
	c, err := ParseConfig([]byte(goodConfig))
	require.NoError(t, err)
	assert.Equal(t, "fake", c.Transport.Name)
	assert.Equal(t, "7", c.Transport.Params["seed"])
	assert.Equal(t, DefaultCap, c.Escalation.Cap)
	assert.Equal(t, PolicyFence, c.Escalation.Policy)
	assert.Equal(t, 10*time.Second, c.Transport.CallTimeout)
	assert.Equal(t, "info", c.LogLevel)
	assert.Equal(t, DefaultEngineConnections, c.Engine.MaxConnections)
}

func TestParseConfigNamesTheBadField(t *testing.T) {
	cases := []struct {
		name, yaml, field string
	}{
		{"missing name", `engine: {socket: /s}`, "config: name:"},
		{"unknown transport", "name: a\nengine: {socket: /s}\ntransport: {name: verbs}", "transport.name"},
		{"bad checksum", "name: a\nengine: {socket: /s}\ntransport: {sha256: abc}", "transport.sha256"},
		{"zero block size", "name: a\nengine: {socket: /s}\npools: [{name: p, path: /x, blocks: 1}]", "pools[0].block_size"},
		{"duplicate pool", "name: a\nengine: {socket: /s}\npools: [{name: p, path: /x, block_size: 1, blocks: 1}, {name: p, path: /y, block_size: 1, blocks: 1}]", "pools[1].name"},
		{"peer named like the host", "name: a\nengine: {socket: /s}\npeers: [{name: a, address: 'x:1'}]", "peers[0].name"},
		{"peer without address", "name: a\nengine: {socket: /s}\npeers: [{name: b}]", "peers[0].address"},
		{"bad policy", "name: a\nengine: {socket: /s}\nescalation: {policy: yolo}", "escalation.policy"},
		{"negative cap", "name: a\nengine: {socket: /s}\nescalation: {cap: -1s}", "escalation.cap"},
		{"relative socket", "name: a\nengine: {socket: s.sock}", "engine.socket"},
		{"negative connection cap", "name: a\nengine: {socket: /s, max_connections: -1}", "engine.max_connections: -1 out of range"},
		{"connection cap too high", "name: a\nengine: {socket: /s, max_connections: 4097}", "engine.max_connections: 4097 out of range"},
		{"bad log level", "name: a\nengine: {socket: /s}\nlog_level: loud", "log_level"},
		{"unknown key", "name: a\nengine: {socket: /s}\ntransprot: {name: fake}", "transprot"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.yaml))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.field)
		})
	}
}

func TestLoadConfigReadsFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "host.yaml")
	require.NoError(t, os.WriteFile(p, []byte(goodConfig), 0o600))
	c, err := LoadConfig(p)
	require.NoError(t, err)
	assert.Equal(t, "prefill-0", c.Name)

	_, err = LoadConfig(filepath.Join(t.TempDir(), "missing.yaml"))
	assert.ErrorContains(t, err, "missing.yaml")
}

func TestExampleConfigsAreValid(t *testing.T) {
	for _, name := range []string{"prefill.yaml", "decode.yaml"} {
		_, err := LoadConfig(filepath.Join("..", "examples", name))
		assert.NoError(t, err, name)
	}
}

// nixl is a built-in name; where its binary was not built (no NIXL
// installed), resolving it says how to get it.
func TestNixlIsABuiltinTransport(t *testing.T) {
	c, err := ParseConfig([]byte("name: a\nengine: {socket: /s}\ntransport: {name: nixl}"))
	require.NoError(t, err)
	t.Setenv("PATH", t.TempDir())
	_, err = PluginPath(c.Transport)
	if err == nil {
		t.Skip("custody-transport-nixl is installed next to the test binary")
	}
	assert.ErrorContains(t, err, "NIXL_PREFIX")
}
