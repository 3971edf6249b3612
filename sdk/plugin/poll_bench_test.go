package plugin_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// BenchmarkPollBatch measures Poll over a real fake plugin process: one
// gRPC round trip per call, with 1, 64 or 4096 DONE handles per call.
// ns/op at batch=1 is the cost of one round trip; ns/handle is what each
// handle costs once batched.
func BenchmarkPollBatch(b *testing.B) {
	const most = 4096
	ctx := context.Background()
	rg := newRig(b, "")
	specs := make([]sdk.PostSpec, most)
	for i := range specs {
		specs[i] = rg.write("")
	}
	posts, err := rg.p.Post(ctx, specs)
	require.NoError(b, err)
	ids := make([]sdk.HandleID, most)
	for i, r := range posts {
		require.NoError(b, r.Err)
		ids[i] = r.ID
	}
	require.Eventually(b, func() bool {
		sts, err := rg.p.Poll(ctx, ids)
		require.NoError(b, err)
		for _, s := range sts {
			if s.Err != nil || s.State != sdk.StateDone {
				return false
			}
		}
		return true
	}, waitFor, tick, "the posted transfers never all turned DONE")

	for _, n := range []int{1, 64, most} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			batch := ids[:n]
			for b.Loop() {
				sts, err := rg.p.Poll(ctx, batch)
				if err != nil || len(sts) != n {
					b.Fatalf("Poll of %d handles: %d results, %v", n, len(sts), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/handle")
		})
	}
}
