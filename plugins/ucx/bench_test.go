package ucx_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// BenchmarkTransfer measures in-process WRITE and READ bandwidth between
// two agents (two UCP workers, each on its own thread): batches of depth
// posts of one descriptor each, polled until all are DONE.
func BenchmarkTransfer(b *testing.B) {
	const region = 64 << 20
	for _, tls := range tlsSettings {
		b.Run(tls, func(b *testing.B) {
			p := newPair(b, tls, region)
			for _, size := range []int{4 << 10, 64 << 10, 1 << 20, 16 << 20} {
				depth := min(64, region/size)
				local, remote := p.dlists(b, depth, size)
				for _, op := range []sdk.Op{sdk.OpWrite, sdk.OpRead} {
					b.Run(fmt.Sprintf("%s/%d", op, size), func(b *testing.B) {
						specs := make([]sdk.PostSpec, depth)
						for i := range specs {
							specs[i] = sdk.PostSpec{Op: op, Local: local, LocalIndices: []uint32{uint32(i)}, Remote: remote, RemoteIndices: []uint32{uint32(i)}}
						}
						b.SetBytes(int64(depth * size))
						for b.Loop() {
							res, err := p.a.Post(context.Background(), specs)
							require.NoError(b, err)
							ids := make([]sdk.HandleID, len(res))
							for i, r := range res {
								require.NoError(b, r.Err)
								ids[i] = r.ID
							}
							for _, st := range pollDone(b, p.a, ids) {
								require.Equal(b, sdk.StateDone, st.State)
							}
						}
					})
				}
			}
		})
	}
}

// BenchmarkTransferBlocks measures posts of many small blocks that lie
// contiguous on both sides (KV blocks in the same order in both pools):
// 16 posts in flight of 256 descriptors of 4 KiB each (1 MiB per post).
// Contiguous descriptors are coalesced into one UCX request per post.
func BenchmarkTransferBlocks(b *testing.B) {
	const region, block, blocks, depth = 64 << 20, 4 << 10, 256, 16
	for _, tls := range tlsSettings {
		b.Run(tls, func(b *testing.B) {
			p := newPair(b, tls, region)
			local, remote := p.dlists(b, blocks*depth, block)
			for _, op := range []sdk.Op{sdk.OpWrite, sdk.OpRead} {
				b.Run(op.String(), func(b *testing.B) {
					specs := make([]sdk.PostSpec, depth)
					for i := range specs {
						idx := make([]uint32, blocks)
						for j := range idx {
							idx[j] = uint32(i*blocks + j)
						}
						specs[i] = sdk.PostSpec{Op: op, Local: local, LocalIndices: idx, Remote: remote, RemoteIndices: idx}
					}
					b.SetBytes(int64(depth * blocks * block))
					for b.Loop() {
						res, err := p.a.Post(context.Background(), specs)
						require.NoError(b, err)
						ids := make([]sdk.HandleID, len(res))
						for i, r := range res {
							require.NoError(b, r.Err)
							ids[i] = r.ID
						}
						for _, st := range pollDone(b, p.a, ids) {
							require.Equal(b, sdk.StateDone, st.State)
						}
					}
				})
			}
		})
	}
}

// BenchmarkCall measures the fixed cost of one call (Resources: it does
// nothing else): the agent's lock and the check for completions, on the
// caller's goroutine, while the progress thread runs beside it.
func BenchmarkCall(b *testing.B) {
	for _, tls := range tlsSettings {
		b.Run(tls, func(b *testing.B) {
			p := newPair(b, tls, 1<<20)
			ctx := context.Background()
			for b.Loop() {
				_, err := p.a.Resources(ctx)
				require.NoError(b, err)
			}
		})
	}
}
