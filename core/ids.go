package core

import (
	"fmt"

	"github.com/custody-dev/custody/sdk"
)

// Epoch numbers one start of a transport process. The caller gives each
// Attach a new, larger epoch. Every native id core keeps is paired with the
// epoch that issued it (rule 14), so an id of an earlier, fenced epoch can
// never be mistaken for a live one: transports never reuse ids within a
// process, but two processes may.
type Epoch uint64

// Ref names one native transfer handle across transport restarts.
type Ref struct {
	Epoch  Epoch
	Handle sdk.HandleID
}

func (r Ref) String() string { return fmt.Sprintf("%d/%d", r.Epoch, r.Handle) }

// RequestID is the engine's name for a request (vLLM's request id). A request
// succeeds or fails as a whole and gets exactly one terminal report.
type RequestID string

// PoolID names a pool registered with RegisterPool. Pool ids are never reused
// by one Core.
type PoolID uint32

// BlockRef names one block of a pool.
type BlockRef struct {
	Pool  PoolID
	Block uint32
}

func (b BlockRef) String() string { return fmt.Sprintf("pool %d block %d", b.Pool, b.Block) }
