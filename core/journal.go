package core

import (
	"slices"

	"github.com/custody-dev/custody/sdk"
)

// entry is one native acquisition of a handshake (rule 5): a
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

// rollback hands out the release of the journal entries of peer from index
// from on, in reverse order of acquisition (dlists before the peers they
// name; a peer only once its rank's dlist is released), keeps every entry
// whose release failed or was not tried, and then calls then with
// the first release error (nil when everything was released, or nothing
// was to release: then runs at once).
func (c *Core) rollback(name string, from int, then func(error)) {
	j := c.journal[name]
	if from >= len(j) || !c.attached {
		then(nil)
		return
	}
	c.rolling[name] = true
	// Entries of a fenced epoch are gone with their process; the fence drops
	// them, so here every entry belongs to the attached epoch.
	todo := slices.Clone(j[from:])
	released := map[entry]bool{}
	var firstErr error
	var lists []sdk.DlistID
	var peers []sdk.PeerID
	var listE, peerE []entry
	for i := len(todo) - 1; i >= 0; i-- {
		if todo[i].dlist {
			lists = append(lists, todo[i].list)
			listE = append(listE, todo[i])
		} else {
			peers = append(peers, todo[i].peer)
			peerE = append(peerE, todo[i])
		}
	}
	note := func(es []entry, res Result, err error) {
		for k, en := range es {
			e := itemErr(res.Errs, k, err)
			if e != nil && !isNotFound(e, err) {
				firstErr = firstErrOf(firstErr, e)
				continue
			}
			released[en] = true
		}
	}
	finish := func() {
		delete(c.rolling, name)
		out := c.journal[name][:0]
		for _, en := range c.journal[name] {
			if !released[en] {
				out = append(out, en)
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
		then(firstErr)
	}
	unload := func() {
		// A rank whose dlist is still held keeps its peer loaded, journaled
		// for the next rollback: unloading it would leave that dlist naming
		// a peer the transport no longer has.
		held := map[int]bool{}
		for _, en := range listE {
			if !released[en] {
				held[en.rank] = true
			}
		}
		var ids []sdk.PeerID
		var es []entry
		for k, en := range peerE {
			if !held[en.rank] {
				ids, es = append(ids, peers[k]), append(es, en)
			}
		}
		if len(ids) == 0 {
			finish()
			return
		}
		c.emit(Work{Kind: WorkUnloadPeers, PeerIDs: ids}, func(res Result, err error) {
			if err == errWorkFenced {
				delete(c.rolling, name)
				then(err)
				return
			}
			note(es, res, err)
			finish()
		})
	}
	if len(lists) == 0 {
		unload()
		return
	}
	c.emit(Work{Kind: WorkReleaseDescriptors, DlistIDs: lists}, func(res Result, err error) {
		if err == errWorkFenced {
			delete(c.rolling, name)
			then(err)
			return
		}
		note(listE, res, err)
		unload()
	})
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
