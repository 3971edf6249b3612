package kit

import "sync/atomic"

// lastID is the last id handed out in this process. Every kind of id
// (region, peer, dlist, handle), of every Book in the process, draws from
// this one counter, so an id is never zero and never reused within the
// process, as the contract requires.
var lastID atomic.Uint64

// NewID returns an id no Book of this process returned before. A Book
// calls it for every resource it records; a transport needs it only for
// ids of its own (for example to tag native requests).
func NewID() uint64 { return lastID.Add(1) }
