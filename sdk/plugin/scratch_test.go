package plugin_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk/plugin"
)

// TestNoSocketOutlivesItsTransport: a transport killed (which cannot
// clean up after itself), stopped, or refused at launch leaves nothing in
// its socket directory's parent; what a previous host left there goes at
// the next start.
func TestNoSocketOutlivesItsTransport(t *testing.T) {
	empty := func(t *testing.T, dir string) {
		t.Helper()
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		assert.Empty(t, entries)
	}
	t.Run("killed", func(t *testing.T) {
		dir := t.TempDir()
		p, err := plugin.Launch(context.Background(), fakeBin, plugin.LaunchOptions{Logger: hclog.NewNullLogger(), SocketDir: dir})
		require.NoError(t, err)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Len(t, entries, 1, "the running transport's socket directory")
		require.NoError(t, p.Kill())
		empty(t, dir)
	})
	t.Run("stopped", func(t *testing.T) {
		dir := t.TempDir()
		p, err := plugin.Launch(context.Background(), fakeBin, plugin.LaunchOptions{Logger: hclog.NewNullLogger(), SocketDir: dir})
		require.NoError(t, err)
		p.Stop()
		empty(t, dir)
	})
	t.Run("refused at launch", func(t *testing.T) {
		dir := t.TempDir()
		_, err := plugin.Launch(context.Background(), fakeV2Bin, plugin.LaunchOptions{Logger: hclog.NewNullLogger(), SocketDir: dir})
		require.Error(t, err)
		empty(t, dir)
	})
	t.Run("left by a previous host", func(t *testing.T) {
		dir := t.TempDir()
		stale := filepath.Join(dir, "custody-transport-123")
		require.NoError(t, os.Mkdir(stale, 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(stale, "plugin456"), nil, 0o600))
		other := filepath.Join(dir, "unrelated")
		require.NoError(t, os.WriteFile(other, nil, 0o600))
		require.NoError(t, plugin.RemoveStaleSocketDirs(dir))
		_, err := os.Stat(stale)
		assert.ErrorIs(t, err, os.ErrNotExist)
		_, err = os.Stat(other)
		assert.NoError(t, err, "only socket directories are removed")
	})
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// TestMissingPluginLogsOnlyItsError: a transport binary that is not there
// was never started, so nothing "failed to exit gracefully".
func TestMissingPluginLogsOnlyItsError(t *testing.T) {
	var out syncBuf
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: &out})
	_, err := plugin.Launch(context.Background(), filepath.Join(t.TempDir(), "missing"), plugin.LaunchOptions{Logger: log})
	require.Error(t, err)
	out.mu.Lock()
	defer out.mu.Unlock()
	assert.NotContains(t, out.b.String(), "failed to exit gracefully")
}
