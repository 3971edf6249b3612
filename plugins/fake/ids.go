package fake

import "sync/atomic"

// lastID is the last id handed out in this process. Every kind of id
// (region, peer, dlist, handle) and every agent draws from this one counter,
// so an id is never reused within the process, as the contract requires,
// and never zero.
var lastID atomic.Uint64

// newID returns an id no agent of this process returned before.
func newID() uint64 { return lastID.Add(1) }
