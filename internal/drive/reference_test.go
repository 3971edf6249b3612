package drive

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/plugins/fake"
	"github.com/custody-dev/custody/sdk"
)

var transports = map[string]func() sdk.Transport{"fake": func() sdk.Transport { return fake.New() }}

func serve(t *testing.T, req string) (referenceResult, error) {
	var out bytes.Buffer
	err := Serve(t.Context(), strings.NewReader(req), &out, transports)
	var res referenceResult
	if err == nil {
		require.NoError(t, json.Unmarshal(out.Bytes(), &res))
	} else {
		assert.Zero(t, out.Len(), "a refused request answers nothing")
	}
	return res, err
}

// A pull reference answers one time per measured pull, and what the
// process used over them.
func TestServePull(t *testing.T) {
	dir := t.TempDir()
	req, err := json.Marshal(Reference{Kind: "pull", Transport: "fake", Params: map[string]string{"dir": dir, "fence": "initiated"}, Dir: dir, BlockSize: 4096, N: 5, Warmup: 2})
	require.NoError(t, err)
	res, err := serve(t, string(req))
	require.NoError(t, err)
	require.Len(t, res.Pull.Pulls, 5)
	for _, d := range res.Pull.Pulls {
		assert.Positive(t, d)
	}
	assert.Positive(t, res.Pull.Cost.CPU)
	if res.Pull.SyscallsErr == "" {
		assert.Positive(t, res.Pull.Cost.Syscalls, "each Poll of the fake reads its region file's state")
	}
}

// Bad requests are refused with an error naming what was wrong.
func TestServeRefusesBadRequests(t *testing.T) {
	for _, c := range []struct{ req, want string }{
		{`{"kind":"sdk","transport":"nope"}`, `no in-process reference for transport "nope" (known: fake)`},
		{`{"kind":"walk","transport":"fake"}`, `kind "walk": want sdk or pull`},
		{`{"kind":"pull","transport":"fake","dir":"/tmp","block_size":4096}`, "pull: n 0"},
		{`{"kind":"pull","transport":"fake","n":1,"block_size":4096}`, `dir ""`},
		{`{"kind":"sdk","transport":"fake","speed":1}`, `unknown field "speed"`},
		{`not json`, "reading the request"},
	} {
		_, err := serve(t, c.req)
		require.Error(t, err, c.req)
		assert.Contains(t, err.Error(), c.want, c.req)
	}
}
