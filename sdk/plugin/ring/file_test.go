package ring

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestAttachRingFileRefusesStrangers(t *testing.T) {
	mem, path, remove, err := CreateFile(smallLayout)
	require.NoError(t, err)
	defer remove()
	defer unix.Munmap(mem)

	require.NoError(t, os.Chmod(path, 0o644))
	_, _, err = AttachFile(path)
	assert.ErrorContains(t, err, "mode 0644, want 0600")
	require.NoError(t, os.Chmod(path, 0o600))

	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(path, link))
	_, _, err = AttachFile(link)
	assert.Error(t, err, "a symlink is not followed")

	mem[offMagic] ^= 1
	_, _, err = AttachFile(path)
	assert.ErrorContains(t, err, "not a ring file")
	mem[offMagic] ^= 1

	putU32(mem[offSubEntries:], 9)
	_, _, err = AttachFile(path)
	assert.ErrorContains(t, err, "header states")
}
