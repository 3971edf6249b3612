package fake

import (
	"testing"

	"github.com/custody-dev/custody/sdk"
)

// BenchmarkFakeWrite measures 1 MiB WRITEs between two in-process agents:
// post, poll until DONE, release, one at a time; under fence=incoming the
// target copies each chunk (incoming.go), under fence=initiated the
// initiator does.
func BenchmarkFakeWrite(b *testing.B) {
	for _, fence := range []string{fenceIncoming, fenceInitiated} {
		b.Run(fence, func(b *testing.B) { benchWrite(b, map[string]string{"fence": fence}) })
	}
}

func benchWrite(b *testing.B, params map[string]string) {
	const size = 1 << 20
	p := newPair(b, size, params, params)
	spec := []sdk.PostSpec{p.whole(sdk.OpWrite, nil)}
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := p.a.Post(ctx, spec)
		if err != nil || res[0].Err != nil {
			b.Fatal(err, res[0].Err)
		}
		ids := []sdk.HandleID{res[0].ID}
		for {
			st, err := p.a.Poll(ctx, ids)
			if err != nil || st[0].Err != nil {
				b.Fatal(err, st[0].Err)
			}
			if st[0].State == sdk.StateDone {
				break
			}
			if st[0].State != sdk.StateInProgress {
				b.Fatal(st[0].State, st[0].Reason)
			}
		}
		if errs, err := p.a.Release(ctx, ids); err != nil || errs[0] != nil {
			b.Fatal(err, errs[0])
		}
	}
}
