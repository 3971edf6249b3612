package fake

import (
	"context"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/kit"
)

// dlist is a prepared descriptor list, as the Book records it.
type dlist = kit.Dlist[*region, *peer, struct{}]

// PrepareDescriptors prepares each dlist. An empty or oversized list, an
// unknown peer or region, a zero length or a range beyond its region is
// INVALID_ARGUMENT and prepares nothing; a remote list a prepare-fail
// fault selects is BACKEND and prepares nothing.
func (t *Transport) PrepareDescriptors(ctx context.Context, lists []sdk.DlistSpec) ([]sdk.DlistResult, error) {
	if err := t.lock(ctx, ""); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	out := make([]sdk.DlistResult, len(lists))
	for i, spec := range lists {
		id, err := t.book.Prepare(spec, t.prepareFault)
		out[i] = sdk.DlistResult{ID: id, Err: err}
	}
	return out, nil
}

// prepareFault counts valid remote dlists and fails the one a
// prepare-fail fault selects.
func (t *Transport) prepareFault(d *dlist) error {
	if d.Local() {
		return nil
	}
	rank := t.prepares
	t.prepares++
	if t.fault(faultPrepareFail, 0, d.Peer.Name, rank) != nil {
		return sdk.Errorf(sdk.CodeBackend, "fake: PrepareDescriptors: injected prepare-fail at remote dlist %d (peer %s); nothing prepared", rank, d.Peer.Name)
	}
	return nil
}

// ReleaseDescriptors releases each dlist. One an unreleased handle uses is
// BUSY and stays valid; an unknown one is NOT_FOUND; one a
// release-dlist-fail fault selects is BACKEND and stays valid.
func (t *Transport) ReleaseDescriptors(ctx context.Context, ids []sdk.DlistID) ([]error, error) {
	if err := t.lock(ctx, ""); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	out := make([]error, len(ids))
	for i, id := range ids {
		if t.ghosts[id] {
			out[i] = sdk.Errorf(sdk.CodeNotFound, "fake: ReleaseDescriptors: dlist %d already released", id)
			continue
		}
		out[i] = t.book.ReleaseDlist(id, func(d *dlist) error {
			if t.fault(faultReleaseDlist, 0, peerName(d), -1) != nil {
				return sdk.Errorf(sdk.CodeBackend, "fake: ReleaseDescriptors: injected release-dlist-fail on dlist %d; it stays valid, retry", id)
			}
			return nil
		})
		if sdk.CodeOf(out[i]) == sdk.CodeBusy && t.allTerminal(id) && t.misbehaves(misbehaveUnpinTerminal) {
			t.ghosts[id], out[i] = true, nil
		}
	}
	return out, nil
}

// allTerminal reports whether every unreleased handle using dlist id is
// terminal (misbehave=unpin-terminal keeps track of them).
func (t *Transport) allTerminal(id sdk.DlistID) bool {
	for h := range t.users[id] {
		if st, _ := h.State(); !st.Terminal() {
			return false
		}
	}
	return true
}

// freeGhosts frees, in the Book, the dlists misbehave=unpin-terminal
// reported released once no handle uses them any more.
func (t *Transport) freeGhosts() {
	for id := range t.ghosts {
		if len(t.users[id]) == 0 && t.book.ReleaseDlist(id, nil) == nil {
			delete(t.ghosts, id)
			delete(t.users, id)
		}
	}
}

// peerName is the agent name of a remote dlist's peer, "" for a local one.
func peerName(d *dlist) string {
	if d.Local() {
		return ""
	}
	return d.Peer.Name
}

// bytes returns the memory of a post's pair: the local descriptor's and
// the remote one's, as mapped here.
func pairBytes(h *handle, p kit.Pair[*region]) (local, remote []byte, lm, rm *mapping) {
	lm, rm = p.Region.Value.m, h.Remote.Peer.Value.regions[p.Remote.Region]
	return lm.data[p.Local.Offset : p.Local.Offset+p.Local.Length], rm.data[p.Remote.Offset : p.Remote.Offset+p.Remote.Length], lm, rm
}
