package fake

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// TestLoadPeersRefusesPathsOutsidePeerDirs: a forged peer's metadata that
// names a file outside peer_dirs (directly, by "..", or by a link inside
// an allowed directory), or a socket that is not a fake's, is
// INVALID_ARGUMENT at LoadPeers, and nothing is opened or loaded.
func TestLoadPeersRefusesPathsOutsidePeerDirs(t *testing.T) {
	allowed := t.TempDir()
	a := open(t, "a", map[string]string{"peer_dirs": allowed})
	b := open(t, "b", map[string]string{"dir": allowed})
	path, err := NewRegionFile(allowed, 4096)
	require.NoError(t, err)
	region := register(t, b, sdk.Region{Path: path, Length: 4096})
	t.Cleanup(func() { _, _ = b.DeregisterMemory(ctx, []sdk.RegionID{region}) })
	blob, err := b.LocalMetadata(ctx)
	require.NoError(t, err)
	good, err := decodeMetadata(blob)
	require.NoError(t, err)

	link := filepath.Join(allowed, "innocent")
	require.NoError(t, os.Symlink("/etc/passwd", link))
	for name, forge := range map[string]func(*metadata){
		"region /etc/passwd":       func(m *metadata) { m.Regions[0].Path = "/etc/passwd" },
		"region escaping by ..":    func(m *metadata) { m.Regions[0].Path = allowed + "/../../etc/passwd" },
		"region linked out":        func(m *metadata) { m.Regions[0].Path = link },
		"region lease /etc/passwd": func(m *metadata) { m.Regions[0].Lease = "/etc/passwd" },
		"life lease /etc/passwd":   func(m *metadata) { m.Life = "/etc/passwd" },
		"notification socket path": func(m *metadata) { m.Notify = "/run/systemd/notify" },
		"another abstract socket":  func(m *metadata) { m.Notify = "@dbus-session" },
	} {
		t.Run(name, func(t *testing.T) {
			md := good
			md.Regions = append([]metaRegion(nil), good.Regions...)
			forge(&md)
			forged, err := encodeMetadata(md)
			require.NoError(t, err)
			res, err := a.LoadPeers(ctx, []sdk.PeerSpec{{Name: "b", Metadata: forged}})
			require.NoError(t, err)
			require.ErrorIs(t, res[0].Err, sdk.ErrInvalidArgument)
			r, err := a.Resources(ctx)
			require.NoError(t, err)
			assert.Zero(t, r.Peers, "nothing loaded")
		})
	}
	// The genuine metadata, in an allowed directory, loads.
	res, err := a.LoadPeers(ctx, []sdk.PeerSpec{{Name: "b", Metadata: blob}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	errs, err := a.UnloadPeers(ctx, []sdk.PeerID{res[0].ID})
	require.NoError(t, err)
	require.NoError(t, errs[0])
}

// TestOpenPeerFileChecksWhatItOpened: a file a peer names is kept only if
// what the kernel opened is a regular file within the allowed directories,
// whatever the path looked like before: a link to a file outside, a FIFO
// (refused without blocking), a directory or an escape by ".." are
// refused, matching errNotAllowed.
func TestOpenPeerFileChecksWhatItOpened(t *testing.T) {
	allowed, outside := t.TempDir(), t.TempDir()
	good := filepath.Join(allowed, "region")
	secret := filepath.Join(outside, "secret")
	for _, p := range []string{good, secret} {
		require.NoError(t, os.WriteFile(p, make([]byte, 4096), 0o600))
	}
	link := filepath.Join(allowed, "innocent")
	require.NoError(t, os.Symlink(secret, link))
	fifo := filepath.Join(allowed, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	dirs := []string{allowed}

	f, err := openPeerFile("region 1", good, os.O_RDWR, dirs)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	for name, path := range map[string]string{
		"a link to a file outside": link,
		"a FIFO":                   fifo,
		"a directory":              allowed,
		"an escape by ..":          filepath.Join(allowed, "..", filepath.Base(outside), "secret"),
	} {
		t.Run(name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				f, err := openPeerFile("region 1", path, os.O_RDONLY, dirs)
				if err == nil {
					f.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				require.ErrorIs(t, err, errNotAllowed)
				assert.ErrorContains(t, err, "region 1")
			case <-time.After(10 * time.Second): // bounds a failure only
				t.Fatal("the open blocked")
			}
		})
	}
}
