package agent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/plugins/fake"
	"github.com/custody-dev/custody/sdk"
)

func fakeStart() Start { return InProcess(func() sdk.Transport { return fake.New() }) }

// New gives an agent a registered region of its own; Connect loads a peer;
// Stop frees both, closes the agent and removes the region file.
func TestNewConnectStop(t *testing.T) {
	dir := t.TempDir()
	params := map[string]string{"dir": dir}
	a, err := New(t.Context(), fakeStart(), "a", params, dir, 4096)
	require.NoError(t, err)
	b, err := New(t.Context(), fakeStart(), "b", params, dir, 8192)
	require.NoError(t, err)
	require.NotZero(t, a.Region.ID)
	st, err := os.Stat(b.Region.File.Name())
	require.NoError(t, err)
	assert.Equal(t, int64(8192), st.Size())
	assert.Equal(t, dir, filepath.Dir(b.Region.File.Name()), "in the directory given")

	require.NoError(t, a.Connect(t.Context(), b))
	require.NotZero(t, a.Peer)
	require.NoError(t, a.Release(t.Context()))
	r, err := a.Transport.Resources(t.Context())
	require.NoError(t, err)
	assert.True(t, r.Zero(), "Release freed the peer and the region: %+v", r)
	path := a.Region.File.Name()
	require.NoError(t, a.Close(t.Context()))
	assert.NoFileExists(t, path)
	require.NoError(t, b.Stop())
	assert.NoFileExists(t, b.Region.File.Name())
	assert.NoError(t, (*Agent)(nil).Stop(), "a nil agent stops at once")
}

// A region the transport refuses fails New, which leaves no file behind.
func TestNewRefusedLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	_, err := New(t.Context(), fakeStart(), "a", map[string]string{"dir": dir}, dir, 0)
	require.ErrorContains(t, err, "RegisterMemory a")
	left, err := filepath.Glob(filepath.Join(dir, "custody-a-*"))
	require.NoError(t, err)
	assert.Empty(t, left)
}

// CreateFile never takes an existing file; Register sets the ids of the
// regions it registered and answers for each.
func TestCreateFileAndRegister(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r")
	f, err := CreateFile(path, 4096)
	require.NoError(t, err)
	_, err = CreateFile(path, 4096)
	require.ErrorIs(t, err, os.ErrExist)

	a, err := Open(t.Context(), fakeStart(), "a", map[string]string{"dir": dir})
	require.NoError(t, err)
	good, bad := &Region{File: f, Length: 4096}, &Region{File: f, Offset: 4096, Length: 4096}
	errs, err := Register(t.Context(), a.Transport, good, bad)
	require.NoError(t, err)
	require.Len(t, errs, 2)
	assert.NoError(t, errs[0])
	assert.Error(t, errs[1], "past the end of the file")
	assert.NotZero(t, good.ID)
	assert.Zero(t, bad.ID)
	a.Region = good
	require.NoError(t, a.Stop())
	assert.NoFileExists(t, path)
}

// NewPair gives both agents a region and loads B into A; Stop leaves no
// file behind.
func TestNewPair(t *testing.T) {
	dir := t.TempDir()
	p, err := NewPair(t.Context(), fakeStart(), "p", map[string]string{"dir": dir}, dir, 4096)
	require.NoError(t, err)
	assert.Equal(t, "p-a", p.A.Name)
	assert.Equal(t, "p-b", p.B.Name)
	assert.NotZero(t, p.A.Peer)
	assert.Zero(t, p.B.Peer)
	require.NoError(t, p.Stop())
	left, err := filepath.Glob(filepath.Join(dir, "custody-p-*"))
	require.NoError(t, err)
	assert.Empty(t, left)
}
