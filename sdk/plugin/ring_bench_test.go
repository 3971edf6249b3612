package plugin_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/custody-dev/custody/sdk"
)

// BenchmarkPostToDone measures one 4 KiB WRITE through a real fake plugin
// process, as a host drives it: Post, Poll until DONE, Release; over the
// shared-memory rings and over gRPC alone, side by side.
func BenchmarkPostToDone(b *testing.B) {
	for _, path := range []struct {
		name string
		off  bool
	}{{"rings", false}, {"grpc", true}} {
		b.Run(path.name, func(b *testing.B) {
			ringsOff = path.off
			defer func() { ringsOff = false }()
			rg := newRig(b, "")
			requirePath(b, rg.p)
			ctx := context.Background()
			spec := []sdk.PostSpec{rg.write("")}
			for b.Loop() {
				res, err := rg.p.Post(ctx, spec)
				if err != nil || res[0].Err != nil {
					b.Fatal(err, res)
				}
				ids := []sdk.HandleID{res[0].ID}
				for {
					sts, err := rg.p.Poll(ctx, ids)
					if err != nil {
						b.Fatal(err)
					}
					if sts[0].State == sdk.StateDone {
						break
					}
					runtime.Gosched()
				}
				errs, err := rg.p.Release(ctx, ids)
				if err != nil || errs[0] != nil {
					b.Fatal(err, errs)
				}
			}
		})
	}
}
