package conformance

import (
	"bytes"
	"context"
	"sync/atomic"

	"github.com/custody-dev/custody/sdk"
)

// limitCap is the largest limit the suite exercises exactly; a stated limit
// above it is only logged.
const limitCap = 1 << 16

// A refused request of more than limitBulk items (descriptors, ids) is
// asked only limitBulkRepeat times: each is megabytes to build, send and
// refuse.
const (
	limitBulk       = 4096
	limitBulkRepeat = 8
)

// checkLimits: each limit Describe states is honoured: at the limit works,
// one past it is INVALID_ARGUMENT and changes nothing.
var checkLimits = check{
	name: "limits/honoured",
	doc: "for every limit Describe states (descriptors per list and per post, items per call, notification and metadata bytes, transfer bytes), " +
		"a request at the limit succeeds and one past it is INVALID_ARGUMENT and changes nothing, asked --repeat (default 100) times, 8 at once (8 times when it carries over 4096 items): a transport letting one in ten through passes with probability 0.9^repeat",
	needs: movesData,
	run: func(e *env) {
		lim := e.desc.Limits
		if lim == (sdk.Limits{PeerLossBoundMillis: lim.PeerLossBoundMillis}) {
			e.t.Skipf("Describe states no limit")
		}
		l := e.link(1 << 20)
		a := l.a
		exercised := 0
		// refused asks call, a request of items items, --repeat times, 8
		// at once (a request of more than limitBulk items only
		// limitBulkRepeat times: each is megabytes): each must be
		// INVALID_ARGUMENT, and together they change nothing.
		refused := func(what string, items uint32, call func(ctx context.Context) error) {
			e.t.Helper()
			before := a.resources()
			reps := e.cfg.Repeat
			if items > limitBulk {
				reps = min(reps, limitBulkRepeat)
			}
			var last atomic.Pointer[error]
			e.parallel(reps, func(t T, _, _ int) {
				ctx, cancel := e.callCtx()
				err := call(ctx)
				cancel()
				last.Store(&err)
				if !is(err, sdk.CodeInvalidArgument) {
					t.Fatalf("%s: %v, want INVALID_ARGUMENT: a request past a stated limit is refused", what, err)
				}
			})
			if after := a.resources(); after != before {
				code := sdk.CodeInvalidArgument
				if err := last.Load(); err != nil {
					code = sdk.CodeOf(*err)
				}
				e.t.Errorf("%s: %+v, then %+v", changedResources(what, code, sdk.CodeInvalidArgument), before, after)
			}
		}
		tooBig := func(n uint32, what string) bool {
			if n > limitCap {
				e.t.Logf("%s limit %d is above %d: not exercised", what, n, limitCap)
				return true
			}
			return false
		}
		ones := func(r *region, n uint32) []sdk.Descriptor {
			d := make([]sdk.Descriptor, n)
			for i := range d {
				d[i] = r.desc(uint64(i)%r.Length, 1)
			}
			return d
		}
		prepare := func(peer sdk.PeerID, d []sdk.Descriptor) func(ctx context.Context) error {
			return func(ctx context.Context) error {
				res, err := a.tr.PrepareDescriptors(ctx, []sdk.DlistSpec{{Peer: peer, Descriptors: d}})
				for _, r := range res {
					if r.Err == nil && r.ID != 0 {
						track(a, &a.heldDlists, r.ID)
					}
				}
				if err == nil && len(res) == 1 {
					err = res[0].Err
				}
				return err
			}
		}
		if n := lim.MaxDescriptorsPerList; n > 0 && !tooBig(n, "MaxDescriptorsPerList") {
			exercised++
			a.releaseDlists(a.dlist(0, ones(l.src, n)...))
			refused("PrepareDescriptors(MaxDescriptorsPerList+1 descriptors)", n+1, prepare(0, ones(l.src, n+1)))
		}
		if n := lim.MaxDescriptorsPerPost; n > 0 && !tooBig(n, "MaxDescriptorsPerPost") {
			exercised++
			m := n + 1
			if l := lim.MaxDescriptorsPerList; l > 0 && m > l {
				m = l
			}
			ld, rd := a.dlist(0, ones(l.src, m)...), a.dlist(l.peer, ones(l.dst, m)...)
			idx := make([]uint32, m)
			for i := range idx {
				idx[i] = uint32(i)
			}
			h := a.post(sdk.PostSpec{Op: sdk.OpWrite, Local: ld, LocalIndices: idx[:n], Remote: rd, RemoteIndices: idx[:n]})[0]
			a.wait(h)
			a.release(h)
			if m > n {
				refused("Post(MaxDescriptorsPerPost+1 descriptors)", m, func(ctx context.Context) error {
					res, err := a.tr.Post(ctx, []sdk.PostSpec{{Op: sdk.OpWrite, Local: ld, LocalIndices: idx, Remote: rd, RemoteIndices: idx}})
					for _, r := range res {
						if r.Err == nil && r.ID != 0 {
							track(a, &a.heldHandles, r.ID)
						}
					}
					if err == nil && len(res) == 1 {
						err = res[0].Err
					}
					return err
				})
			} else {
				e.t.Logf("MaxDescriptorsPerPost+1 exceeds MaxDescriptorsPerList: the per-post limit is exercised only at its value")
			}
		}
		if n := lim.MaxItemsPerCall; n > 0 && !tooBig(n, "MaxItemsPerCall") {
			exercised++
			ids := make([]sdk.HandleID, n+1)
			for i := range ids {
				ids[i] = unknownHandle + sdk.HandleID(i)
			}
			ctx, cancel := e.callCtx()
			if _, err := a.tr.Poll(ctx, ids[:n]); err != nil {
				e.t.Errorf("Poll of MaxItemsPerCall (%d) unknown ids failed as a whole: %v; each item is NOT_FOUND", n, err)
			}
			cancel()
			refused("Poll(MaxItemsPerCall+1 ids)", n+1, func(ctx context.Context) error {
				_, err := a.tr.Poll(ctx, ids)
				return err
			})
		}
		if n := lim.MaxNotificationBytes; n > 0 && e.desc.Capabilities.Notifications && !tooBig(n, "MaxNotificationBytes") {
			exercised++
			msg := bytes.Repeat([]byte{'n'}, int(n))
			a.send(l.peer, string(msg))
			l.b.drainUntil("a notification of MaxNotificationBytes", hasMessage(string(msg)))
			refused("SendNotifications(MaxNotificationBytes+1)", 1, func(ctx context.Context) error {
				errs, err := a.tr.SendNotifications(ctx, []sdk.OutboundNotification{{Peer: l.peer, Message: append(msg, 'x')}})
				return firstErr(errs, err)
			})
		}
		if n := lim.MaxMetadataBytes; n > 0 {
			exercised++
			for range 3 {
				_ = a.regions(regionSpec{size: 4096}, regionSpec{size: 4096}, regionSpec{size: 4096}, regionSpec{size: 4096})
			}
			_ = a.metadata() // checks the length against the limit
		}
		if n := lim.MaxTransferBytes; n > 0 && n <= bigTransfer {
			exercised++
			x := e.linkBetween(a, l.b, n+1)
			h := a.post(sdk.PostSpec{Op: sdk.OpWrite, Local: a.dlist(0, x.src.desc(0, n)), LocalIndices: []uint32{0},
				Remote: a.dlist(x.peer, x.dst.desc(0, n)), RemoteIndices: []uint32{0}})[0]
			a.wait(h)
			a.release(h)
			refused("Post(MaxTransferBytes+1)", 1, func(ctx context.Context) error {
				res, err := a.tr.Post(ctx, []sdk.PostSpec{x.spec(sdk.OpWrite)})
				for _, r := range res {
					if r.Err == nil && r.ID != 0 {
						track(a, &a.heldHandles, r.ID)
					}
				}
				if err == nil && len(res) == 1 {
					err = res[0].Err
				}
				return err
			})
		}
		if exercised == 0 {
			e.t.Skipf("every limit Describe states is above what the suite exercises")
		}
	},
}
