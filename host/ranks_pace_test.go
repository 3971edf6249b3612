package host

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/client"
)

// TestRanksPublishALoneRequestAtOnce: the pacing of a rank's writes of
// terminal states (publishEvery) holds a state back only while other
// requests run on the rank. With the pace set to an hour, requests pulled
// one after another still finish on every rank, each state written as it
// finished.
func TestRanksPublishALoneRequestAtOnce(t *testing.T) {
	defer func(d time.Duration) { publishEvery = d }(publishEvery)
	publishEvery = time.Hour // read once, as each rank's sync starts
	prefill := startHost(t, "prefill", 64, nil)
	rg := newRankGroup(t, "dec")
	d := rg.mustStart(rankSpec{blocks: 32}, rankSpec{blocks: 32})
	for _, r := range d {
		require.NoError(t, r.c.ConnectPeer(r.ctx(), "prefill", client.RemoteRank{Address: prefill.h.MetadataAddr(), Pool: "kv"}))
	}
	for i := range 3 {
		id := fmt.Sprintf("lone-%d", i)
		src, dst, _ := pullRanks(t, prefill, d, 2, id, 2)
		for r, h := range d {
			f := h.waitFinished(id)
			assert.Equal(t, []string{id}, f.FinishedRecving, "rank %d", r)
			assert.Empty(t, f.Failed, "rank %d", r)
			sameBlocks(t, src[r], h.read(dst[r]), fmt.Sprintf("rank %d", r))
		}
	}
}
