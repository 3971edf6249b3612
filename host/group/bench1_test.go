package group

import (
	"context"
	"testing"
)

// BenchmarkRound1 is one lone request's round trip through a 2-rank
// group: both ranks report it, and both wait for the watch to resolve it.
func BenchmarkRound1(b *testing.B) {
	ranks := benchCluster(b, 2)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ts, ids := batch(i, 1)
		for _, g := range ranks {
			if err := g.Report(ctx, ts); err != nil {
				b.Fatal(err)
			}
		}
		for _, g := range ranks {
			for {
				out, err := g.Resolve(ctx, ids)
				if err != nil {
					b.Fatal(err)
				}
				if out[0].Resolved {
					break
				}
				<-g.Changed()
			}
		}
	}
}
