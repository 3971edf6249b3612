package drive

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin/agent"
)

// Bounds of the smoke copy: copyPause between two polls of its transfer,
// copyStopTimeout for the teardown of each agent.
const (
	copyPause       = 200 * time.Microsecond
	copyStopTimeout = 10 * time.Second
)

// Copy is `custody copy`, a smoke test of a transport: two agents of start
// with regions of size bytes; a WRITE and then a READ of random bytes, each
// one transfer over every one of blocks equal descriptors, each checked
// byte for byte at its destination. At the end each agent must hold no
// native resource. It prints a line per op and one with the total rate.
func Copy(ctx context.Context, out io.Writer, start agent.Start, params map[string]string, size, blocks int) (err error) {
	p, err := agent.NewPair(ctx, start, "copy", params, agent.Dir(), uint64(size))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stopChecked(p.A), stopChecked(p.B)) }()
	a, b := p.A, p.B
	bs := uint64(size / blocks)
	lists, err := Prepare(ctx, a, a.Region.Blocks(blocks, bs), b.Region.Blocks(blocks, bs))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, lists.Release(ctx, a)) }()
	idx := make([]uint32, blocks)
	for i := range idx {
		idx[i] = uint32(i)
	}
	began := time.Now()
	for _, op := range []sdk.Op{sdk.OpWrite, sdk.OpRead} {
		src, dst := a.Region, b.Region
		if op == sdk.OpRead {
			src, dst = b.Region, a.Region
		}
		want := make([]byte, size)
		if _, err := rand.Read(want); err != nil {
			return err
		}
		if _, err := src.File.WriteAt(want, 0); err != nil {
			return err
		}
		if err := copyOnce(ctx, a.Transport, sdk.PostSpec{Op: op, Local: lists.Local, LocalIndices: idx, Remote: lists.Remote, RemoteIndices: idx}); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		got := make([]byte, size)
		if _, err := dst.File.ReadAt(got, 0); err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("%s: %d of %d bytes differ at the destination", op, countDiff(got, want), size)
		}
		fmt.Fprintf(out, "%-5s %d bytes in %d descriptors: verified\n", op, size, blocks)
	}
	el := time.Since(began)
	fmt.Fprintf(out, "moved %d bytes in %v (%.1f MB/s), every byte verified\n",
		2*size, el.Round(time.Millisecond), float64(2*size)/el.Seconds()/1e6)
	return nil
}

// copyOnce posts spec and settles it, polling copyPause apart until ctx
// ends.
func copyOnce(ctx context.Context, t sdk.Transport, spec sdk.PostSpec) error {
	ids, err := Post(ctx, t, []sdk.PostSpec{spec})
	if err != nil {
		return err
	}
	_, err = Settle(ctx, t, ids, func(int) error {
		select {
		case <-ctx.Done():
			return fmt.Errorf("handle %d still running: %w", ids[0], ctx.Err())
		case <-time.After(copyPause):
			return nil
		}
	})
	return err
}

// stopChecked stops the agent as Stop does, after checking, once its peer
// and region are freed, that it holds no native resource.
func stopChecked(a *agent.Agent) error {
	ctx, cancel := context.WithTimeout(context.Background(), copyStopTimeout)
	defer cancel()
	err := a.Release(ctx)
	if err == nil {
		var r sdk.Resources
		if r, err = a.Transport.Resources(ctx); err != nil {
			err = fmt.Errorf("resources of %s: %w", a.Name, err)
		} else if !r.Zero() {
			err = fmt.Errorf("%s leaked native resources: %+v", a.Name, r)
		}
	}
	return errors.Join(err, a.Close(ctx))
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
