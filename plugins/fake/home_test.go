package fake

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// leaseEntries lists what agents left in dir.
func leaseEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// TestLeaseFilesGoWithTheirAgent: an agent's lease files are removed when
// it closes, when it is killed, and, when its process died and could not,
// by the next agent that opens in the same directory; a live agent's stay.
func TestLeaseFilesGoWithTheirAgent(t *testing.T) {
	for _, end := range []string{"close", "kill"} {
		t.Run(end, func(t *testing.T) {
			dir := t.TempDir()
			a := New()
			require.NoError(t, a.Open(ctx, sdk.OpenRequest{Agent: "a", Params: map[string]string{"dir": dir}}))
			path := regionFile(t, 4096, 0)
			id := register(t, a, sdk.Region{Path: path, Length: 4096})
			require.NotEmpty(t, leaseEntries(t, dir))
			if end == "close" {
				errs, err := a.DeregisterMemory(ctx, []sdk.RegionID{id})
				require.NoError(t, err)
				require.NoError(t, errs[0])
				require.NoError(t, a.Close(ctx))
			} else {
				a.Kill()
			}
			assert.Empty(t, leaseEntries(t, dir))
		})
	}
	t.Run("process died", func(t *testing.T) {
		dir := t.TempDir()
		live := open(t, "live", map[string]string{"dir": dir})
		dead, err := makeHome(dir)
		require.NoError(t, err)
		l, err := acquireLease(dead.path)
		require.NoError(t, err)
		l.close()      // the process died: the kernel drops its locks,
		dead.f.Close() // and its files stay
		require.Len(t, leaseEntries(t, dir), 2)

		open(t, "b", map[string]string{"dir": dir}) // the next start
		_, err = os.Stat(dead.path)
		assert.ErrorIs(t, err, os.ErrNotExist, "the dead agent's lease files were swept")
		assert.Len(t, leaseEntries(t, dir), 2, "both live agents keep theirs")
		_, err = os.Stat(filepath.Dir(live.life.path()))
		assert.NoError(t, err)
	})
}
