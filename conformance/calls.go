package conformance

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// The helpers below call the transport on behalf of a check: each fails the
// check (Fatalf) on an error it does not expect, records what it created in
// the agent's tracker, and splits batches by Limits.MaxItemsPerCall.

// maxBatch is the largest batch the suite sends in one call.
func (e *env) maxBatch() int {
	n := 1024
	if m := int(e.desc.Limits.MaxItemsPerCall); m > 0 && m < n {
		n = m
	}
	return n
}

// chunks calls fn on consecutive slices of items of at most maxBatch items.
func chunks[X any](e *env, items []X, fn func([]X)) {
	for len(items) > 0 {
		n := min(len(items), e.maxBatch())
		fn(items[:n])
		items = items[n:]
	}
}

// itemErrs fails the check when a batched call or one of its items failed.
func (a *agent) itemErrs(what string, errs []error, err error, n int) {
	a.t.Helper()
	if err != nil {
		a.t.Fatalf("%s on agent %q (%d items): %v", what, a.name, n, err)
	}
	if len(errs) != n {
		a.t.Fatalf("%s on agent %q: %d results for %d items", what, a.name, len(errs), n)
	}
	for i, err := range errs {
		if err != nil {
			a.t.Fatalf("%s on agent %q, item %d: %v", what, a.name, i, err)
		}
	}
}

// metadata returns the agent's LocalMetadata, checked against the limit.
func (a *agent) metadata() []byte {
	a.t.Helper()
	ctx, cancel := a.e.callCtx()
	defer cancel()
	md, err := a.tr.LocalMetadata(ctx)
	if err != nil {
		a.t.Fatalf("LocalMetadata(agent %q): %v", a.name, err)
	}
	if m := a.e.desc.Limits.MaxMetadataBytes; m > 0 && uint64(len(md)) > uint64(m) {
		a.t.Errorf("LocalMetadata(agent %q) is %d bytes, over Limits.MaxMetadataBytes %d", a.name, len(md), m)
	}
	return md
}

// loadPeer loads b's current metadata into a and returns the peer id. Call
// it after b registered the regions a will reach.
func (a *agent) loadPeer(b *agent) sdk.PeerID {
	a.t.Helper()
	md := b.metadata()
	ctx, cancel := a.e.callCtx()
	defer cancel()
	res, err := a.tr.LoadPeers(ctx, []sdk.PeerSpec{{Name: b.name, Metadata: md}})
	errs := make([]error, len(res))
	for i, r := range res {
		errs[i] = r.Err
	}
	a.itemErrs("LoadPeers("+b.name+")", errs, err, 1)
	track(a, &a.heldPeers, res[0].ID)
	return res[0].ID
}

// unloadPeer unloads a peer the check loaded; it must succeed.
func (a *agent) unloadPeer(id sdk.PeerID) {
	a.t.Helper()
	ctx, cancel := a.e.callCtx()
	defer cancel()
	errs, err := a.tr.UnloadPeers(ctx, []sdk.PeerID{id})
	a.itemErrs("UnloadPeers", errs, err, 1)
	untrack(a, &a.heldPeers, id)
}

// dlists prepares descriptor lists.
func (a *agent) dlists(specs ...sdk.DlistSpec) []sdk.DlistID {
	a.t.Helper()
	var ids []sdk.DlistID
	chunks(a.e, specs, func(specs []sdk.DlistSpec) {
		ctx, cancel := a.e.callCtx()
		defer cancel()
		res, err := a.tr.PrepareDescriptors(ctx, specs)
		errs := make([]error, len(res))
		for i, r := range res {
			errs[i] = r.Err
			if r.Err == nil {
				track(a, &a.heldDlists, r.ID)
			}
		}
		a.itemErrs("PrepareDescriptors", errs, err, len(specs))
		for _, r := range res {
			ids = append(ids, r.ID)
		}
	})
	return ids
}

// dlist prepares one descriptor list (peer 0: local).
func (a *agent) dlist(peer sdk.PeerID, descs ...sdk.Descriptor) sdk.DlistID {
	a.t.Helper()
	return a.dlists(sdk.DlistSpec{Peer: peer, Descriptors: descs})[0]
}

// releaseDlists releases dlists the check prepared; it must succeed.
func (a *agent) releaseDlists(ids ...sdk.DlistID) {
	a.t.Helper()
	ctx, cancel := a.e.callCtx()
	defer cancel()
	errs, err := a.tr.ReleaseDescriptors(ctx, ids)
	a.itemErrs("ReleaseDescriptors", errs, err, len(ids))
	untrack(a, &a.heldDlists, ids...)
}

// post posts transfers and returns their handles.
func (a *agent) post(specs ...sdk.PostSpec) []sdk.HandleID {
	a.t.Helper()
	var ids []sdk.HandleID
	chunks(a.e, specs, func(specs []sdk.PostSpec) {
		ctx, cancel := a.e.callCtx()
		defer cancel()
		res, err := a.tr.Post(ctx, specs)
		errs := make([]error, len(res))
		for i, r := range res {
			errs[i] = r.Err
			if r.Err == nil {
				track(a, &a.heldHandles, r.ID)
			}
		}
		a.itemErrs("Post", errs, err, len(specs))
		for _, r := range res {
			ids = append(ids, r.ID)
		}
	})
	return ids
}

// poll polls handles and holds every answer to the contract's rules for a
// status: an item error carries no state, a state is one of the four, and
// a FAILED handle says why.
func (a *agent) poll(ids ...sdk.HandleID) []sdk.HandleStatus {
	a.t.Helper()
	return a.pollWith(a.tr.Poll, ids)
}

// recheck is poll asked of the transport itself (Agent.PollTransport),
// for the re-checks of terminal states.
func (a *agent) recheck(ids ...sdk.HandleID) []sdk.HandleStatus {
	a.t.Helper()
	if a.ag.PollTransport != nil {
		return a.pollWith(a.ag.PollTransport, ids)
	}
	return a.pollWith(a.tr.Poll, ids)
}

func (a *agent) pollWith(poll func(context.Context, []sdk.HandleID) ([]sdk.HandleStatus, error), ids []sdk.HandleID) []sdk.HandleStatus {
	a.t.Helper()
	out := make([]sdk.HandleStatus, 0, len(ids))
	chunks(a.e, ids, func(ids []sdk.HandleID) {
		ctx, cancel := a.e.callCtx()
		defer cancel()
		st, err := poll(ctx, ids)
		if err != nil {
			a.t.Fatalf("Poll(%d handles of agent %q): %v", len(ids), a.name, err)
		}
		if len(st) != len(ids) {
			a.t.Fatalf("Poll(%d handles of agent %q): %d results", len(ids), a.name, len(st))
		}
		for i, s := range st {
			checkStatus(a.t, ids[i], s)
		}
		out = append(out, st...)
	})
	return out
}

// checkStatus holds one Poll result to the rules of sdk.HandleStatus.
func checkStatus(t T, id sdk.HandleID, s sdk.HandleStatus) {
	t.Helper()
	switch {
	case s.Err != nil && s.State != 0:
		t.Errorf("Poll(handle %d): item error %v came with state %v: a poll error must never be reported as a state", id, s.Err, s.State)
	case s.Err == nil && (s.State < sdk.StateInProgress || s.State > sdk.StateCanceled):
		t.Errorf("Poll(handle %d): no error and no valid state (%v)", id, s.State)
	case s.Err == nil && s.State == sdk.StateFailed && s.Reason == nil:
		t.Errorf("Poll(handle %d): FAILED without a reason", id)
	case s.Err == nil && (s.State == sdk.StateInProgress || s.State == sdk.StateDone) && s.Reason != nil:
		t.Errorf("Poll(handle %d): %v with a reason (%v)", id, s.State, s.Reason)
	}
}

// wait polls handles until every one is terminal and returns the first
// terminal status seen of each. It returns as soon as the last one turns
// terminal, so that a caller can check the destination bytes at once. A
// Poll item error fails the check.
func (a *agent) wait(ids ...sdk.HandleID) []sdk.HandleStatus {
	a.t.Helper()
	return a.waitFor(settleTimeout, ids...)
}

func (a *agent) waitFor(bound time.Duration, ids ...sdk.HandleID) []sdk.HandleStatus {
	a.t.Helper()
	out := make([]sdk.HandleStatus, len(ids))
	pending := make([]int, len(ids))
	for i := range pending {
		pending[i] = i
	}
	deadline := time.Now().Add(bound)
	var b backoff
	for {
		q := make([]sdk.HandleID, len(pending))
		for j, i := range pending {
			q[j] = ids[i]
		}
		st := a.poll(q...)
		next := pending[:0]
		for j, i := range pending {
			switch {
			case st[j].Err != nil:
				a.t.Fatalf("Poll(handle %d of agent %q): %v while it was live", ids[i], a.name, st[j].Err)
			case st[j].State.Terminal():
				out[i] = st[j]
			default:
				next = append(next, i)
			}
		}
		pending = next
		if len(pending) == 0 {
			return out
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("%d of %d handles of agent %q still IN_PROGRESS after %v (first: %d)", len(pending), len(ids), a.name, bound, ids[pending[0]])
		}
		b.wait()
	}
}

// release releases handles; every one must succeed.
func (a *agent) release(ids ...sdk.HandleID) {
	a.t.Helper()
	chunks(a.e, ids, func(ids []sdk.HandleID) {
		ctx, cancel := a.e.callCtx()
		defer cancel()
		errs, err := a.tr.Release(ctx, ids)
		a.itemErrs("Release", errs, err, len(ids))
		untrack(a, &a.heldHandles, ids...)
	})
}

// resources returns the agent's resource counters.
func (a *agent) resources() sdk.Resources {
	a.t.Helper()
	ctx, cancel := a.e.callCtx()
	defer cancel()
	r, err := a.tr.Resources(ctx)
	if err != nil {
		a.t.Fatalf("Resources(agent %q): %v", a.name, err)
	}
	return r
}

// codeOf returns the code of a single-item batched call: the call's error
// when it failed as a whole, else the item's.
func codeOf(errs []error, err error) sdk.Code {
	if err != nil || len(errs) == 0 {
		return sdk.CodeOf(err)
	}
	return sdk.CodeOf(errs[0])
}

// is reports whether err has code c.
func is(err error, c sdk.Code) bool { return errors.Is(err, &sdk.Error{Code: c}) }

// firstErr returns the call's error, else the first item's.
func firstErr(errs []error, err error) error {
	if err != nil || len(errs) == 0 {
		return err
	}
	return errs[0]
}

// changedResources says that a call that should have been refused with
// want changed Resources, without claiming it was refused when it
// answered got instead.
func changedResources(what string, got, want sdk.Code) string {
	if got == want {
		return what + " was refused (" + want.String() + ") but changed Resources"
	}
	return what + " answered " + got.String() + ", not " + want.String() + ", and changed Resources"
}

// itoa formats an id for a message.
func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

// deregister deregisters regions the check registered; it must succeed.
func (a *agent) deregister(ids ...sdk.RegionID) {
	a.t.Helper()
	ctx, cancel := a.e.callCtx()
	defer cancel()
	errs, err := a.tr.DeregisterMemory(ctx, ids)
	a.itemErrs("DeregisterMemory", errs, err, len(ids))
	untrack(a, &a.heldRegions, ids...)
}
