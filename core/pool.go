package core

import (
	"context"
	"errors"
	"fmt"

	"github.com/custody-dev/custody/sdk"
)

// PoolSpec is memory the engine shares, cut into Blocks equal blocks of
// BlockSize bytes starting at Offset of the file at Path.
type PoolSpec struct {
	Path      string
	Offset    uint64
	BlockSize uint64
	Blocks    uint32
}

// pool is a registered PoolSpec: its native registration and local dlist
// (one descriptor per block, so a block's index in the dlist is its id) in
// the epoch that made them, and the owner of every block.
type pool struct {
	id     PoolID
	spec   PoolSpec
	epoch  Epoch // epoch of region and local; zero when not registered
	region sdk.RegionID
	local  sdk.DlistID
	owner  []Owner
	free   []uint32 // stack of OwnerFree blocks
}

type strayRegion struct {
	epoch  Epoch
	region sdk.RegionID
}

func (c *Core) pool(id PoolID) *pool {
	if id == 0 || int(id) > len(c.pools) {
		return nil
	}
	return c.pools[id-1]
}

// RegisterPool registers a pool with the attached transport and prepares its
// local descriptor list. Every block starts OwnerFree. On error nothing is
// registered and no pool is added.
func (c *Core) RegisterPool(ctx context.Context, spec PoolSpec) (PoolID, error) {
	switch {
	case c.tr == nil:
		return 0, fmt.Errorf("core: register pool %q: %w; call Attach first", spec.Path, ErrNotAttached)
	case spec.Path == "":
		return 0, errors.New("core: register pool: PoolSpec.Path is empty; name the file that holds the pool")
	case spec.BlockSize == 0 || spec.Blocks == 0:
		return 0, fmt.Errorf("core: register pool %q: BlockSize %d and Blocks %d must both be positive", spec.Path, spec.BlockSize, spec.Blocks)
	case spec.BlockSize > (1<<63)/uint64(spec.Blocks):
		return 0, fmt.Errorf("core: register pool %q: %d blocks of %d bytes overflow 64 bits", spec.Path, spec.Blocks, spec.BlockSize)
	}
	if m := c.desc.Limits.MaxDescriptorsPerList; m > 0 && spec.Blocks > m {
		return 0, fmt.Errorf("core: register pool %q: %d blocks exceed the transport's %d descriptors per list; use fewer, larger blocks", spec.Path, spec.Blocks, m)
	}
	p := &pool{id: PoolID(len(c.pools) + 1), spec: spec, owner: make([]Owner, spec.Blocks), free: make([]uint32, spec.Blocks)}
	for i := range p.free {
		p.free[i] = spec.Blocks - 1 - uint32(i)
	}
	if err := c.registerPool(ctx, p); err != nil {
		return 0, fmt.Errorf("core: %w", err)
	}
	c.pools = append(c.pools, p)
	return p.id, nil
}

// registerPool makes p's native registration and local dlist in the attached
// epoch, undoing the registration if the dlist fails.
func (c *Core) registerPool(ctx context.Context, p *pool) error {
	s := p.spec
	regs, err := c.tr.RegisterMemory(ctx, []sdk.Region{{Path: s.Path, Offset: s.Offset, Length: s.BlockSize * uint64(s.Blocks), Kind: sdk.MemoryHost}})
	if err == nil && len(regs) != 1 {
		err = fmt.Errorf("transport returned %d results for 1 region", len(regs))
	}
	if err == nil {
		err = regs[0].Err
	}
	if err != nil {
		return fmt.Errorf("register pool %q with epoch %d: %w", s.Path, c.epoch, err)
	}
	region := regs[0].ID
	descs := make([]sdk.Descriptor, s.Blocks)
	for i := range descs {
		descs[i] = sdk.Descriptor{Region: region, Offset: uint64(i) * s.BlockSize, Length: s.BlockSize}
	}
	res, err := c.tr.PrepareDescriptors(ctx, []sdk.DlistSpec{{Descriptors: descs}})
	if err == nil && len(res) != 1 {
		err = fmt.Errorf("transport returned %d results for 1 dlist", len(res))
	}
	if err == nil {
		err = res[0].Err
	}
	if err != nil {
		if derr := c.deregister(ctx, region); derr != nil {
			c.strayRg = append(c.strayRg, strayRegion{c.epoch, region})
			c.alert(Alert{Level: AlertError, Kind: "pool_rollback_failed", Err: derr})
		}
		return fmt.Errorf("prepare the local descriptors of pool %q in epoch %d: %w", s.Path, c.epoch, err)
	}
	p.epoch, p.region, p.local = c.epoch, region, res[0].ID
	return nil
}

func (c *Core) deregister(ctx context.Context, region sdk.RegionID) error {
	errs, err := c.tr.DeregisterMemory(ctx, []sdk.RegionID{region})
	if err == nil && len(errs) == 1 {
		err = errs[0]
	}
	return err
}

// PoolRegion is the transport's id of a pool's memory, which peers name in
// their RankSpec.Region, and the epoch it belongs to.
func (c *Core) PoolRegion(id PoolID) (sdk.RegionID, Epoch, error) {
	p := c.pool(id)
	if p == nil {
		return 0, 0, fmt.Errorf("core: pool %d is not registered; use an id RegisterPool returned", id)
	}
	return p.region, p.epoch, nil
}

// Alloc hands n free blocks of a pool to the engine. On error nothing moves.
func (c *Core) Alloc(id PoolID, n int) ([]uint32, error) {
	p := c.pool(id)
	if p == nil {
		return nil, fmt.Errorf("core: alloc from pool %d: no such pool; use an id RegisterPool returned", id)
	}
	if n < 0 || n > len(p.free) {
		return nil, fmt.Errorf("core: alloc %d blocks from pool %d: %d are free", n, id, len(p.free))
	}
	got := make([]uint32, n)
	for i := range got {
		b := p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
		p.owner[b] = OwnerEngine
		got[i] = b
	}
	return got, nil
}

// Free takes engine blocks back into the free set. Every block must be held by
// the engine; otherwise nothing moves.
func (c *Core) Free(id PoolID, blocks []uint32) error {
	p := c.pool(id)
	if p == nil {
		return fmt.Errorf("core: free to pool %d: no such pool; use an id RegisterPool returned", id)
	}
	if err := p.checkEngine(blocks); err != nil {
		return fmt.Errorf("core: free: %w", err)
	}
	for _, b := range blocks {
		p.owner[b] = OwnerFree
		p.free = append(p.free, b)
	}
	return nil
}

// checkEngine verifies that blocks exist, are held by the engine and are
// distinct.
func (p *pool) checkEngine(blocks []uint32) error {
	return checkEngineParts([]*pool{p}, [][]uint32{blocks})
}

// ownerMark temporarily marks visited blocks while looking for duplicates.
const ownerMark Owner = 255

// checkEngineParts verifies that every block of every (pool, blocks) pair
// exists, is held by the engine, and appears once in all of them. It changes
// nothing.
func checkEngineParts(pools []*pool, blocks [][]uint32) error {
	for i, p := range pools {
		for _, b := range blocks[i] {
			if b >= uint32(len(p.owner)) {
				return fmt.Errorf("pool %d has %d blocks, so block %d does not exist", p.id, len(p.owner), b)
			}
			if o := p.owner[b]; o != OwnerEngine {
				return fmt.Errorf("pool %d block %d is held by %v, not the engine; pass only blocks the engine holds", p.id, b, o)
			}
		}
	}
	var dup error
	for i, p := range pools {
		for _, b := range blocks[i] {
			if p.owner[b] == ownerMark && dup == nil {
				dup = fmt.Errorf("pool %d block %d is listed twice; list each block once", p.id, b)
			}
			p.owner[b] = ownerMark
		}
	}
	for i, p := range pools {
		for _, b := range blocks[i] {
			p.owner[b] = OwnerEngine
		}
	}
	return dup
}

// setOwner moves blocks to owner o.
func (p *pool) setOwner(blocks []uint32, o Owner) {
	for _, b := range blocks {
		p.owner[b] = o
	}
}
