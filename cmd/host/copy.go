package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/custody-dev/custody/internal/drive"
	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
)

func init() {
	var (
		pluginPath string
		params     []string
		size       int
		blocks     int
	)
	cmd := &cobra.Command{
		Use:   "copy",
		Short: "smoke test: move random bytes between two transport processes by WRITE and READ and verify them",
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := parseParams(params)
			if err != nil {
				return err
			}
			if size <= 0 || blocks <= 0 || size%blocks != 0 {
				return fmt.Errorf("--size %d must be a positive multiple of --blocks %d", size, blocks)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			defer cancel()
			return runCopy(ctx, cmd.OutOrStdout(), pluginPath, p, size, blocks)
		},
	}
	cmd.Flags().StringVar(&pluginPath, "plugin", defaultPlugin("fake"), "transport plugin binary")
	cmd.Flags().StringArrayVar(&params, "param", nil, "transport parameter k=v (repeatable)")
	cmd.Flags().IntVar(&size, "size", 16<<20, "bytes per region")
	cmd.Flags().IntVar(&blocks, "blocks", 64, "descriptors per transfer")
	rootCmd.AddCommand(cmd)
}

// copyAgent is one side of the smoke test: a transport process and its region.
type copyAgent struct {
	name   string
	pl     *plugin.Plugin
	path   string
	region sdk.RegionID
	peer   sdk.PeerID
	local  sdk.DlistID
	remote sdk.DlistID
}

func runCopy(ctx context.Context, out io.Writer, pluginPath string, params map[string]string, size, blocks int) (err error) {
	a, b := &copyAgent{name: "copy-a"}, &copyAgent{name: "copy-b"}
	for _, ag := range []*copyAgent{a, b} {
		defer func() { err = errors.Join(err, ag.stop()) }()
		if err := ag.start(ctx, pluginPath, params, size); err != nil {
			return err
		}
	}
	if err := a.connect(ctx, b, size, blocks); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, a.teardown(ctx), b.teardown(ctx)) }()

	start := time.Now()
	for _, op := range []sdk.Op{sdk.OpWrite, sdk.OpRead} {
		src, dst := a, b
		if op == sdk.OpRead {
			src, dst = b, a
		}
		want := make([]byte, size)
		if _, err := rand.Read(want); err != nil {
			return err
		}
		if err := os.WriteFile(src.path, want, 0o600); err != nil {
			return err
		}
		if err := a.transfer(ctx, op, blocks); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		got, err := os.ReadFile(dst.path)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("%s: %d of %d bytes differ at the destination", op, countDiff(got, want), size)
		}
		fmt.Fprintf(out, "%-5s %d bytes in %d descriptors: verified\n", op, size, blocks)
	}
	el := time.Since(start)
	fmt.Fprintf(out, "moved %d bytes in %v (%.1f MB/s), every byte verified\n",
		2*size, el.Round(time.Millisecond), float64(2*size)/el.Seconds()/1e6)
	return nil
}

func (ag *copyAgent) start(ctx context.Context, path string, params map[string]string, size int) error {
	f, err := os.CreateTemp(drive.ShmDir(), "custody-copy-*.region")
	if err != nil {
		return err
	}
	ag.path = f.Name()
	if err := errors.Join(f.Truncate(int64(size)), f.Close()); err != nil {
		return err
	}
	if ag.pl, err = plugin.Launch(ctx, path, plugin.LaunchOptions{}); err != nil {
		return err
	}
	if err := ag.pl.Open(ctx, sdk.OpenRequest{Agent: ag.name, Params: params}); err != nil {
		return fmt.Errorf("open %s: %w", ag.name, err)
	}
	reg, err := drive.One(ag.pl.RegisterMemory(ctx, []sdk.Region{{Path: ag.path, Length: uint64(size), Kind: sdk.MemoryHost}}))
	if err = drive.FirstErr(err, reg.Err); err != nil {
		return fmt.Errorf("register %s: %w", ag.path, err)
	}
	ag.region = reg.ID
	return nil
}

// connect loads b as a's peer and prepares a's local and remote dlists, each
// cutting the region into blocks equal descriptors.
func (ag *copyAgent) connect(ctx context.Context, b *copyAgent, size, blocks int) error {
	md, err := b.pl.LocalMetadata(ctx)
	if err != nil {
		return fmt.Errorf("metadata of %s: %w", b.name, err)
	}
	peer, err := drive.One(ag.pl.LoadPeers(ctx, []sdk.PeerSpec{{Name: b.name, Metadata: md}}))
	if err = drive.FirstErr(err, peer.Err); err != nil {
		return fmt.Errorf("load peer %s: %w", b.name, err)
	}
	ag.peer = peer.ID
	cut := func(r sdk.RegionID) []sdk.Descriptor {
		bs := uint64(size / blocks)
		ds := make([]sdk.Descriptor, blocks)
		for i := range ds {
			ds[i] = sdk.Descriptor{Region: r, Offset: uint64(i) * bs, Length: bs}
		}
		return ds
	}
	lists, err := ag.pl.PrepareDescriptors(ctx, []sdk.DlistSpec{
		{Descriptors: cut(ag.region)},
		{Peer: ag.peer, Descriptors: cut(b.region)},
	})
	if err == nil && len(lists) != 2 {
		err = fmt.Errorf("transport returned %d dlists for 2", len(lists))
	}
	if err == nil {
		err = errors.Join(lists[0].Err, lists[1].Err)
	}
	if err != nil {
		return fmt.Errorf("prepare dlists: %w", err)
	}
	ag.local, ag.remote = lists[0].ID, lists[1].ID
	return nil
}

// transfer posts one transfer over every block, polls it to a terminal state
// and releases it.
func (ag *copyAgent) transfer(ctx context.Context, op sdk.Op, blocks int) error {
	idx := make([]uint32, blocks)
	for i := range idx {
		idx[i] = uint32(i)
	}
	post, err := drive.One(ag.pl.Post(ctx, []sdk.PostSpec{{Op: op, Local: ag.local, LocalIndices: idx, Remote: ag.remote, RemoteIndices: idx}}))
	if err = drive.FirstErr(err, post.Err); err != nil {
		return fmt.Errorf("post: %w", err)
	}
	h := post.ID
	for {
		st, err := drive.One(ag.pl.Poll(ctx, []sdk.HandleID{h}))
		if err = drive.FirstErr(err, st.Err); err != nil {
			return fmt.Errorf("poll handle %d: %w", h, err)
		}
		if st.State.Terminal() {
			rel, err := drive.One(ag.pl.Release(ctx, []sdk.HandleID{h}))
			if err = drive.FirstErr(err, rel); err != nil {
				return fmt.Errorf("release handle %d: %w", h, err)
			}
			if st.State != sdk.StateDone {
				return fmt.Errorf("handle %d ended %s: %v", h, st.State, st.Reason)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("handle %d still %s: %w", h, st.State, ctx.Err())
		case <-time.After(200 * time.Microsecond):
		}
	}
}

// teardown releases in reverse order and checks that the agent holds nothing.
func (ag *copyAgent) teardown(ctx context.Context) error {
	var errs []error
	if ag.local != 0 || ag.remote != 0 {
		res, err := ag.pl.ReleaseDescriptors(ctx, []sdk.DlistID{ag.local, ag.remote})
		errs = append(errs, err)
		errs = append(errs, res...)
	}
	if ag.peer != 0 {
		res, err := ag.pl.UnloadPeers(ctx, []sdk.PeerID{ag.peer})
		errs = append(errs, err)
		errs = append(errs, res...)
	}
	return errors.Join(errs...)
}

// stop deregisters the region, checks the agent holds nothing, closes it,
// ends the process and removes the region file.
func (ag *copyAgent) stop() error {
	defer os.Remove(ag.path)
	if ag.pl == nil {
		return nil
	}
	defer ag.pl.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ag.region != 0 {
		res, err := drive.One(ag.pl.DeregisterMemory(ctx, []sdk.RegionID{ag.region}))
		if err = drive.FirstErr(err, res); err != nil {
			return fmt.Errorf("deregister region of %s: %w", ag.name, err)
		}
	}
	r, err := ag.pl.Resources(ctx)
	if err != nil {
		return fmt.Errorf("resources of %s: %w", ag.name, err)
	}
	if !r.Zero() {
		return fmt.Errorf("%s leaked native resources: %+v", ag.name, r)
	}
	if err := ag.pl.Close(ctx); err != nil {
		return fmt.Errorf("close %s: %w", ag.name, err)
	}
	return nil
}

func countDiff(a, b []byte) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}
