package drive

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// Pull measures the transport itself: two agents of mk in this process,
// opened with params, their regions of blockSize bytes in dir; a READ of
// one block is posted and polled in a loop until DONE, warmup times and
// then n times measured.
func Pull(ctx context.Context, mk func() sdk.Transport, params map[string]string, dir string, blockSize, n, warmup int) ([]time.Duration, error) {
	type side struct {
		t      sdk.Transport
		region sdk.RegionID
	}
	var sides [2]side
	defer func() {
		for _, s := range sides {
			if s.t != nil {
				_ = s.t.Close(context.Background())
			}
		}
	}()
	for i := range sides {
		t := mk()
		if err := t.Open(ctx, sdk.OpenRequest{Agent: fmt.Sprintf("inproc-%d", i), Params: params}); err != nil {
			return nil, fmt.Errorf("open: %w", err)
		}
		sides[i].t = t
		path := filepath.Join(dir, fmt.Sprintf("inproc-%d.region", i))
		if err := os.WriteFile(path, make([]byte, blockSize), 0o600); err != nil {
			return nil, err
		}
		reg, err := One(t.RegisterMemory(ctx, []sdk.Region{{Path: path, Length: uint64(blockSize), Kind: sdk.MemoryHost}}))
		if err = FirstErr(err, reg.Err); err != nil {
			return nil, fmt.Errorf("register memory: %w", err)
		}
		sides[i].region = reg.ID
	}
	a, b := sides[0].t, sides[1].t
	md, err := b.LocalMetadata(ctx)
	if err != nil {
		return nil, err
	}
	pr, err := One(a.LoadPeers(ctx, []sdk.PeerSpec{{Name: "inproc-1", Metadata: md}}))
	if err = FirstErr(err, pr.Err); err != nil {
		return nil, fmt.Errorf("load peer: %w", err)
	}
	dl, err := a.PrepareDescriptors(ctx, []sdk.DlistSpec{
		{Descriptors: []sdk.Descriptor{{Region: sides[0].region, Length: uint64(blockSize)}}},
		{Peer: pr.ID, Descriptors: []sdk.Descriptor{{Region: sides[1].region, Length: uint64(blockSize)}}},
	})
	if err != nil {
		return nil, err
	}
	for _, r := range dl {
		if r.Err != nil {
			return nil, r.Err
		}
	}
	spec := sdk.PostSpec{Op: sdk.OpRead, Local: dl[0].ID, LocalIndices: []uint32{0}, Remote: dl[1].ID, RemoteIndices: []uint32{0}}
	out := make([]time.Duration, 0, n)
	for i := range n + warmup {
		start := time.Now()
		p, err := One(a.Post(ctx, []sdk.PostSpec{spec}))
		if err = FirstErr(err, p.Err); err != nil {
			return nil, fmt.Errorf("post: %w", err)
		}
		for {
			st, err := One(a.Poll(ctx, []sdk.HandleID{p.ID}))
			if err = FirstErr(err, st.Err); err != nil {
				return nil, fmt.Errorf("poll: %w", err)
			}
			if st.State == sdk.StateDone {
				break
			}
			if st.State.Terminal() {
				return nil, fmt.Errorf("handle %d ended %v: %v", p.ID, st.State, st.Reason)
			}
		}
		if i >= warmup {
			out = append(out, time.Since(start))
		}
		if _, err := a.Release(ctx, []sdk.HandleID{p.ID}); err != nil {
			return nil, err
		}
	}
	_, _ = a.ReleaseDescriptors(ctx, []sdk.DlistID{dl[0].ID, dl[1].ID})
	_, _ = a.UnloadPeers(ctx, []sdk.PeerID{pr.ID})
	for _, s := range sides {
		_, _ = s.t.DeregisterMemory(ctx, []sdk.RegionID{s.region})
	}
	return out, nil
}
