package host

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/client"
)

// pull runs one pull request: the prefill side pins n blocks of random
// bytes, the decode side reads them and notifies the producer.
func pull(t *testing.T, prefill, decode *testHost, id string, n int) (src [][]byte, dst []uint32) {
	t.Helper()
	pb, err := prefill.c.Alloc(prefill.ctx(), prefill.poolID, n)
	require.NoError(t, err)
	src = prefill.fill(pb)
	require.NoError(t, prefill.c.ExpectSend(prefill.ctx(), id, "", prefill.poolID, pb, 1, 30*time.Second))
	dst, err = decode.c.Alloc(decode.ctx(), decode.poolID, n)
	require.NoError(t, err)
	require.NoError(t, decode.c.Read(decode.ctx(), id, "prefill", true, client.Part{Pool: decode.poolID, Local: dst, Remote: pb}))
	return src, dst
}

func TestPullMovesEveryByteAndFinishesBothSides(t *testing.T) {
	prefill := startHost(t, "prefill", 16, nil)
	decode := startHost(t, "decode", 16, nil)
	decode.connect("prefill", prefill)

	src, dst := pull(t, prefill, decode, "r1", 4)
	f := decode.waitFinished("r1")
	assert.Equal(t, []string{"r1"}, f.FinishedRecving)
	assert.Empty(t, f.Failed)
	sameBlocks(t, src, decode.read(dst), "r1")

	f = prefill.waitFinished("r1")
	assert.Equal(t, []string{"r1"}, f.FinishedSending, "the consumed notification finished the send")
}

func TestPushMovesEveryByteAndFinishesAtTheLease(t *testing.T) {
	prefill := startHost(t, "prefill", 16, nil)
	decode := startHost(t, "decode", 16, nil)
	prefill.connect("decode", decode)

	pb, err := prefill.c.Alloc(prefill.ctx(), prefill.poolID, 3)
	require.NoError(t, err)
	src := prefill.fill(pb)
	db, err := decode.c.Alloc(decode.ctx(), decode.poolID, 3)
	require.NoError(t, err)
	require.NoError(t, prefill.c.Write(prefill.ctx(), "w1", "decode", 1, 300*time.Millisecond, client.Part{Pool: prefill.poolID, Local: pb, Remote: db}))

	// No consumer notifies, so the send ends with its lease.
	f := prefill.waitFinished("w1")
	assert.Equal(t, []string{"w1"}, f.FinishedSending)
	assert.Empty(t, f.Failed)
	sameBlocks(t, src, decode.read(db), "w1")
}
