package fake_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/testbin"
	"github.com/custody-dev/custody/plugins/fake"
	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
)

// BenchmarkFakeWriteProcesses measures 1 MiB WRITEs between two fake
// transport processes, as a host drives them: batches of posts in one call,
// polled and released in one call each; under fence=incoming the target's
// process copies each chunk it is handed over its incoming socket, under
// fence=initiated the initiator copies into its own mapping.
func BenchmarkFakeWriteProcesses(b *testing.B) {
	for _, fence := range []string{"incoming", "initiated"} {
		b.Run(fence, func(b *testing.B) { benchWriteProcesses(b, fence) })
	}
}

func benchWriteProcesses(b *testing.B, fence string) {
	const (
		size  = 1 << 20
		slots = 64
		batch = 8
	)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir, err := testbin.Build(b.TempDir(), "custody-transport-fake")
	if err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(dir, "custody-transport-fake")
	type agent struct {
		pl     *plugin.Plugin
		region sdk.RegionID
	}
	var ag [2]agent
	for i := range ag {
		pl, err := plugin.Launch(ctx, bin, plugin.LaunchOptions{})
		if err != nil {
			b.Fatal(err)
		}
		defer pl.Stop()
		if err := pl.Open(ctx, sdk.OpenRequest{Agent: []string{"bench-a", "bench-b"}[i], Params: map[string]string{"dir": b.TempDir(), "peer_dirs": os.TempDir() + ":/dev/shm", "fence": fence}}); err != nil {
			b.Fatal(err)
		}
		path, err := fake.NewRegionFile("", slots*size)
		if err != nil {
			b.Fatal(err)
		}
		defer os.Remove(path)
		regs, err := pl.RegisterMemory(ctx, []sdk.Region{{Path: path, Length: slots * size, Kind: sdk.MemoryHost}})
		if err != nil || regs[0].Err != nil {
			b.Fatal(err, regs)
		}
		ag[i] = agent{pl: pl, region: regs[0].ID}
	}
	a := ag[0].pl
	md, err := ag[1].pl.LocalMetadata(ctx)
	if err != nil {
		b.Fatal(err)
	}
	peers, err := a.LoadPeers(ctx, []sdk.PeerSpec{{Name: "bench-b", Metadata: md}})
	if err != nil || peers[0].Err != nil {
		b.Fatal(err, peers)
	}
	cut := func(r sdk.RegionID) []sdk.Descriptor {
		ds := make([]sdk.Descriptor, slots)
		for i := range ds {
			ds[i] = sdk.Descriptor{Region: r, Offset: uint64(i) * size, Length: size}
		}
		return ds
	}
	lists, err := a.PrepareDescriptors(ctx, []sdk.DlistSpec{{Descriptors: cut(ag[0].region)}, {Peer: peers[0].ID, Descriptors: cut(ag[1].region)}})
	if err != nil || lists[0].Err != nil || lists[1].Err != nil {
		b.Fatal(err, lists)
	}
	posts := make([]sdk.PostSpec, batch)
	b.SetBytes(size)
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		n := min(batch, b.N-done)
		for i := range n {
			k := uint32((done + i) % slots)
			posts[i] = sdk.PostSpec{Op: sdk.OpWrite, Local: lists[0].ID, LocalIndices: []uint32{k}, Remote: lists[1].ID, RemoteIndices: []uint32{k}}
		}
		res, err := a.Post(ctx, posts[:n])
		if err != nil {
			b.Fatal(err)
		}
		ids := make([]sdk.HandleID, n)
		for i, r := range res {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
			ids[i] = r.ID
		}
		for {
			st, err := a.Poll(ctx, ids)
			if err != nil {
				b.Fatal(err)
			}
			running := 0
			for _, s := range st {
				switch {
				case s.Err != nil:
					b.Fatal(s.Err)
				case s.State == sdk.StateInProgress:
					running++
				case s.State != sdk.StateDone:
					b.Fatal(s.State, s.Reason)
				}
			}
			if running == 0 {
				break
			}
		}
		if errs, err := a.Release(ctx, ids); err != nil || errs[0] != nil {
			b.Fatal(err, errs)
		}
	}
}
