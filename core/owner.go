package core

import "fmt"

// Owner is who holds a block. Every block of a pool is held by exactly one
// owner at a time; a block moves from the transfer owners back to the engine
// only through a finished report (Ready), so the engine never reuses a block
// a transfer may still touch.
type Owner uint8

const (
	// OwnerFree: nobody uses the block; Alloc hands it to the engine.
	OwnerFree Owner = iota
	// OwnerEngine: the engine holds the block; it may read, write or reuse it,
	// or pass it to Read, Write or ExpectSend.
	OwnerEngine
	// OwnerTransfer: a request holds the block; a live handle may touch it,
	// or a peer may still read it (ExpectSend) or write into it
	// (ExpectReceive).
	OwnerTransfer
	// OwnerRetained: the block's request lost its session (its peer was
	// removed or the Core closed) while a handle touching the block still
	// ran. It stays pinned until that handle stops (rule 6).
	OwnerRetained
	// OwnerQuarantined: a handle touching the block was force-released
	// without proof that it stopped (rule 8), or a failed push receive's
	// producer may still write into it and no fence can stop it. The block
	// is never handed back.
	OwnerQuarantined
)

var ownerNames = [...]string{
	OwnerFree:        "free",
	OwnerEngine:      "engine",
	OwnerTransfer:    "transfer",
	OwnerRetained:    "retained",
	OwnerQuarantined: "quarantined",
}

func (o Owner) String() string {
	if int(o) < len(ownerNames) {
		return ownerNames[o]
	}
	return fmt.Sprintf("Owner(%d)", uint8(o))
}
