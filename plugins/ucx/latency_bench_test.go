package ucx_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// BenchmarkPostDone measures one 4 KiB WRITE between two in-process agents
// from Post to the Poll that first sees it DONE, one transfer at a time:
// Post, then Poll in a tight loop until DONE, then Release. It reports the
// median and 99th percentile of that time (p50-µs, p99-µs); ns/op also
// counts the Release.
func BenchmarkPostDone(b *testing.B) {
	const size = 4 << 10
	for _, tls := range tlsSettings {
		b.Run(tls, func(b *testing.B) {
			p := newPair(b, tls, 1<<20)
			local, remote := p.dlists(b, 1, size)
			ctx := context.Background()
			spec := []sdk.PostSpec{{Op: sdk.OpWrite, Local: local, LocalIndices: []uint32{0}, Remote: remote, RemoteIndices: []uint32{0}}}
			lat := make([]time.Duration, 0, 1<<16)
			for b.Loop() {
				start := time.Now()
				res, err := p.a.Post(ctx, spec)
				require.NoError(b, err)
				require.NoError(b, res[0].Err)
				ids := []sdk.HandleID{res[0].ID}
				for {
					// No require in the loop: each require call walks the
					// stack, which would dominate what is measured.
					sts, err := p.a.Poll(ctx, ids)
					if err == nil {
						err = sts[0].Err
					}
					if err != nil {
						b.Fatalf("Poll: %v", err)
					}
					if sts[0].State.Terminal() {
						if sts[0].State != sdk.StateDone {
							b.Fatalf("handle ended %v: %v", sts[0].State, sts[0].Reason)
						}
						break
					}
				}
				lat = append(lat, time.Since(start))
				errs, err := p.a.Release(ctx, ids)
				require.NoError(b, err)
				require.NoError(b, errs[0])
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*9/10].Nanoseconds())/1e3, "p90-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
		})
	}
}
