package conformance

import (
	"fmt"
	"sync"

	"github.com/custody-dev/custody/sdk"
)

// Shape of the concurrency check.
const (
	concWorkers = 8
	concRounds  = 40
	concBatch   = 8
	concSlot    = 16 << 10
)

// checkConcurrent: eight goroutines post, poll and release at once, on one
// agent, each moving its own bytes; every byte arrives and every handle is
// accounted for. Run it under the race detector to test an in-process
// transport's locking.
var checkConcurrent = check{
	name:  "contract/concurrent",
	doc:   "8 goroutines posting, polling, releasing and counting resources at once on one agent all see their bytes arrive exactly",
	needs: movesData,
	run: func(e *env) {
		size := uint64(concWorkers * concBatch * concSlot)
		l := e.link(size)
		a := l.a
		var wg sync.WaitGroup
		errs := make([]error, concWorkers)
		left := make([][]sdk.HandleID, concWorkers)
		for w := range concWorkers {
			wg.Go(func() { left[w], errs[w] = concWorker(e, l, w) })
		}
		wg.Wait()
		for w := range concWorkers {
			track(a, &a.heldHandles, left[w]...)
			if errs[w] != nil {
				e.t.Errorf("goroutine %d: %v", w, errs[w])
			}
		}
	},
}

// concWorker runs one goroutine of the concurrency check. It cannot call
// Fatalf (another goroutine's), so it returns its first error and the
// handles it could not release.
func concWorker(e *env, l *link, w int) ([]sdk.HandleID, error) {
	a := l.a
	base := uint64(w * concBatch * concSlot)
	for round := range concRounds {
		want := pattern(uint64(1000*w+round), concBatch*concSlot)
		if _, err := l.src.File.WriteAt(want, int64(l.src.Offset+base)); err != nil {
			return nil, err
		}
		specs := make([]sdk.DlistSpec, 0, 2*concBatch)
		for i := range uint64(concBatch) {
			specs = append(specs,
				sdk.DlistSpec{Descriptors: []sdk.Descriptor{l.src.desc(base+i*concSlot, concSlot)}},
				sdk.DlistSpec{Peer: l.peer, Descriptors: []sdk.Descriptor{l.dst.desc(base+i*concSlot, concSlot)}})
		}
		ctx, cancel := e.callCtx()
		res, err := a.tr.PrepareDescriptors(ctx, specs)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("PrepareDescriptors: %w", err)
		}
		var dl []sdk.DlistID
		posts := make([]sdk.PostSpec, 0, concBatch)
		for i, r := range res {
			if r.Err != nil {
				return nil, fmt.Errorf("PrepareDescriptors item %d: %w", i, r.Err)
			}
			dl = append(dl, r.ID)
			if i%2 == 1 {
				posts = append(posts, sdk.PostSpec{Op: sdk.OpWrite, Local: res[i-1].ID, LocalIndices: []uint32{0}, Remote: r.ID, RemoteIndices: []uint32{0}})
			}
		}
		ctx, cancel = e.callCtx()
		pres, err := a.tr.Post(ctx, posts)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("Post: %w", err)
		}
		var ids []sdk.HandleID
		for i, r := range pres {
			if r.Err != nil {
				return ids, fmt.Errorf("Post item %d: %w", i, r.Err)
			}
			ids = append(ids, r.ID)
		}
		if err := concSettle(e, a, ids); err != nil {
			return ids, err
		}
		got := make([]byte, len(want))
		if _, err := l.dst.File.ReadAt(got, int64(l.dst.Offset+base)); err != nil {
			return nil, err
		}
		if i := firstDiff(got, want); i >= 0 {
			return nil, fmt.Errorf("round %d: destination differs at byte %d of its slice after DONE", round, i)
		}
		ctx, cancel = e.callCtx()
		rerrs, err := a.tr.Release(ctx, ids)
		cancel()
		if err = firstItemErr(rerrs, err); err != nil {
			return ids, fmt.Errorf("Release of DONE handles: %w", err)
		}
		ctx, cancel = e.callCtx()
		if _, err := a.tr.Resources(ctx); err != nil {
			cancel()
			return nil, fmt.Errorf("Resources: %w", err)
		}
		derrs, err := a.tr.ReleaseDescriptors(ctx, dl)
		cancel()
		if err = firstItemErr(derrs, err); err != nil {
			return nil, fmt.Errorf("ReleaseDescriptors: %w", err)
		}
	}
	return nil, nil
}

// concSettle polls ids until every one is DONE.
func concSettle(e *env, a *agent, ids []sdk.HandleID) error {
	var b backoff
	for {
		ctx, cancel := e.callCtx()
		st, err := a.tr.Poll(ctx, ids)
		cancel()
		if err != nil {
			return fmt.Errorf("Poll: %w", err)
		}
		done := 0
		for i, s := range st {
			switch {
			case s.Err != nil:
				return fmt.Errorf("Poll(handle %d): %w", ids[i], s.Err)
			case s.State == sdk.StateDone:
				done++
			case s.State.Terminal():
				return fmt.Errorf("handle %d ended %v (%v), want DONE", ids[i], s.State, s.Reason)
			}
		}
		if done == len(ids) {
			return nil
		}
		if e.ctx.Err() != nil {
			return fmt.Errorf("%d handles not DONE when the check timed out", len(ids)-done)
		}
		b.wait()
	}
}

// firstItemErr returns the call's error or the first item error.
func firstItemErr(errs []error, err error) error {
	if err != nil {
		return err
	}
	for i, e := range errs {
		if e != nil {
			return fmt.Errorf("item %d: %w", i, e)
		}
	}
	return nil
}
