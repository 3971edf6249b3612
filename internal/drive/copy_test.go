package drive

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/plugins/fake"
	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin/agent"
)

// The smoke copy moves and verifies both ways, and leaves nothing behind.
func TestCopyVerifiesBothWays(t *testing.T) {
	var out bytes.Buffer
	start := agent.InProcess(func() sdk.Transport { return fake.New() })
	err := Copy(t.Context(), &out, start, map[string]string{"dir": t.TempDir()}, 64<<10, 16)
	require.NoError(t, err, out.String())
	assert.Contains(t, out.String(), "WRITE 65536 bytes in 16 descriptors: verified")
	assert.Contains(t, out.String(), "READ  65536 bytes in 16 descriptors: verified")
	assert.Contains(t, out.String(), "every byte verified")
}
