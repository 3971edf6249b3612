//go:build nixl

package nixl

import (
	"github.com/custody-dev/custody/sdk"
)

// nameRef is an agent name loaded into NIXL. NIXL keys remote agents by
// name, so every load of one agent shares its NIXL state.
type nameRef struct {
	refs int // loaded peers (PeerIDs) of this agent
	// lost is set once NIXL reported the agent disconnected: NIXL then
	// dropped the agent's metadata itself (invalidateRemoteData).
	lost bool
	// parked orders the names no peer uses any more but whose NIXL state
	// is kept (see unload); 0 while loaded.
	parked uint64
}

// maxParked bounds the agents whose NIXL state outlives their last
// UnloadPeers; past it the longest parked is invalidated.
var maxParked = 16

// loadName loads an agent's NIXL metadata for one more peer and returns
// the status of loadRemoteMD and the name NIXL read from the blob.
func (t *Transport) loadName(agent string, blob []byte) (string, status) {
	name, st := t.nat.loadMD(blob)
	ref := t.names[agent]
	if st == statusBackend && ref != nil && ref.refs == 0 {
		// A parked agent of that name came back with another connection
		// (NIXL's NOT_ALLOWED, which the C API says as ERROR_BACKEND):
		// drop the old state and load the new.
		t.nat.invalidate(agent)
		delete(t.names, agent)
		ref = nil
		name, st = t.nat.loadMD(blob)
	}
	if st != statusSuccess || name != agent {
		return name, st
	}
	if ref == nil {
		ref = &nameRef{}
		t.names[agent] = ref
	}
	ref.refs++
	ref.parked = 0
	return name, st
}

// unloadName drops one peer's use of an agent's NIXL state. The last use
// parks the state instead of invalidating it, unless NIXL reported the
// agent lost: invalidateRemoteMD closes the UCX endpoint, and when that
// endpoint's wire-up has not finished (an agent loaded and unloaded
// without a transfer), UCX 1.13 in the peer's process fails an assertion
// (ucp_request.c: "got REP message") once the connection goes, and the
// peer's transport dies. A parked agent that is loaded again reuses its
// endpoint; the longest parked beyond maxParked, and every one at Close,
// is invalidated.
func (t *Transport) unloadName(p string) error {
	ref := t.names[p]
	if ref.refs > 1 {
		ref.refs--
		return nil
	}
	if !ref.lost {
		ref.refs = 0
		t.parkSeq++
		ref.parked = t.parkSeq
		t.evictParked()
		return nil
	}
	// NOT_FOUND: NIXL dropped the agent itself after the disconnect.
	if st := t.nat.invalidate(p); st != statusSuccess && st != statusNotFound {
		return sdk.Errorf(sdk.CodeBackend, "nixl: UnloadPeers of agent %s: invalidateRemoteMD returned %v; it stays loaded", p, st)
	}
	delete(t.names, p)
	return nil
}

// evictParked invalidates the longest parked agents beyond maxParked.
func (t *Transport) evictParked() {
	for {
		oldest, n := "", 0
		for name, ref := range t.names {
			if ref.refs == 0 {
				n++
				if oldest == "" || ref.parked < t.names[oldest].parked {
					oldest = name
				}
			}
		}
		if n <= maxParked {
			return
		}
		t.nat.invalidate(oldest)
		delete(t.names, oldest)
	}
}
