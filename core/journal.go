package core

import (
	"context"

	"github.com/custody-dev/custody/sdk"
)

// entry is one native acquisition of a handshake (rule 5, seed 000): a
// loaded peer or a prepared remote dlist of one remote rank. It is recorded
// the moment the transport returns it, before control leaves ConnectPeer, and
// it leaves the journal only when the peer is published (the peer record
// then owns it) or its native release succeeds.
type entry struct {
	epoch Epoch
	rank  int
	dlist bool
	peer  sdk.PeerID
	list  sdk.DlistID
}

// rollback releases the journal entries of peer from index from on, in
// reverse order of acquisition (dlists before the peers they name), and keeps
// every entry whose release failed. It reports the first release error.
func (c *Core) rollback(ctx context.Context, name string, from int) error {
	j := c.journal[name]
	if from >= len(j) {
		return nil
	}
	var firstErr error
	keep := make([]bool, len(j))
	// Entries of a fenced epoch are gone with their process; the fence drops
	// them, so here every entry belongs to the attached epoch.
	var lists []sdk.DlistID
	var listIdx []int
	for i := len(j) - 1; i >= from; i-- {
		if j[i].dlist {
			lists = append(lists, j[i].list)
			listIdx = append(listIdx, i)
		}
	}
	if len(lists) > 0 {
		errs, err := c.tr.ReleaseDescriptors(ctx, lists)
		for k, i := range listIdx {
			e := itemErr(errs, k, err)
			if e != nil && !isNotFound(e, err) {
				keep[i] = true
				if firstErr == nil {
					firstErr = e
				}
			}
		}
	}
	var peers []sdk.PeerID
	var peerIdx []int
	for i := len(j) - 1; i >= from; i-- {
		if !j[i].dlist {
			peers = append(peers, j[i].peer)
			peerIdx = append(peerIdx, i)
		}
	}
	if len(peers) > 0 {
		errs, err := c.tr.UnloadPeers(ctx, peers)
		for k, i := range peerIdx {
			e := itemErr(errs, k, err)
			if e != nil && !isNotFound(e, err) {
				keep[i] = true
				if firstErr == nil {
					firstErr = e
				}
			}
		}
	}
	out := j[:from]
	for i := from; i < len(j); i++ {
		if keep[i] {
			out = append(out, j[i])
		}
	}
	if len(out) == 0 {
		delete(c.journal, name)
	} else {
		c.journal[name] = out
	}
	if firstErr != nil {
		c.alert(Alert{Level: AlertError, Kind: "handshake_rollback_failed", Peer: name, Err: firstErr})
	}
	return firstErr
}

// itemErr is item k's outcome of a batched call: the call's error when the
// call failed as a whole, else the item's error.
func itemErr(errs []error, k int, callErr error) error {
	if callErr != nil {
		return callErr
	}
	if k >= len(errs) {
		return sdk.Errorf(sdk.CodeBackend, "transport returned %d results for more items", len(errs))
	}
	return errs[k]
}

// isNotFound: an item-level NOT_FOUND on a release means the resource is
// already gone (an earlier call that timed out took effect), so the release
// has, in effect, succeeded. A call-level error never counts.
func isNotFound(itemErr, callErr error) bool {
	return callErr == nil && sdk.CodeOf(itemErr) == sdk.CodeNotFound
}
