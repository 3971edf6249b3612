package fake

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// TestCancelNone: under cancel=none, Cancel of a running handle is
// accepted and changes nothing: the transfer runs to DONE, every byte
// lands and its notification arrives; an unknown handle is still
// NOT_FOUND.
func TestCancelNone(t *testing.T) {
	g := newGatedPair(t, 64<<10, 4096, map[string]string{"cancel": "none"})
	h := postOne(t, g.a, g.whole(sdk.OpWrite, []byte("landed")))
	g.steps(2)
	errs, err := g.a.Cancel(ctx, []sdk.HandleID{h, 987654321})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], sdk.ErrNotFound)
	g.open()
	st := terminal(t, g.a, h)
	require.Equal(t, sdk.StateDone, st.State)
	require.NoError(t, st.Reason)
	require.Equal(t, readFile(t, g.aPath), readFile(t, g.bPath), "every byte landed")
	require.Equal(t, []sdk.Notification{{From: "a", Message: []byte("landed")}}, drainNotes(t, g.b, 1))
	release(t, g.a, h)
}
