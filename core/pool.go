package core

import (
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
	failed error    // its first registration failed: unusable
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
// local descriptor list: the calls are Work in the next Ready, and
// PoolReady says when they are done. Every block starts OwnerFree. Bad
// input is an error that changes nothing. If registration fails the pool id
// stays taken but unusable (PoolReady returns the error; Alloc refuses it).
func (c *Core) RegisterPool(spec PoolSpec) (PoolID, error) {
	switch {
	case !c.attached:
		return 0, fmt.Errorf("core: register pool %q: %w; call Attach first", spec.Path, ErrNotAttached)
	case c.closing:
		return 0, fmt.Errorf("core: register pool %q: the Core is closing", spec.Path)
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
	c.pools = append(c.pools, p)
	c.registerPool(p, false)
	return p.id, nil
}

// PoolReady reports whether pool id is registered with the attached
// transport (true), its registration is under way (false, nil), or it failed
// (false and the error).
func (c *Core) PoolReady(id PoolID) (bool, error) {
	p := c.pool(id)
	switch {
	case p == nil:
		return false, fmt.Errorf("core: pool %d is not registered; use an id RegisterPool returned", id)
	case p.failed != nil:
		return false, p.failed
	case !c.attached:
		return false, fmt.Errorf("core: pool %d: %w", id, ErrNotAttached)
	}
	return p.epoch == c.epoch && p.local != 0, nil
}

// registerPool hands out p's native registration and then its local dlist
// in the attached epoch, undoing the registration if the dlist fails. A
// failure fails a new pool (again false), or asks for a fence of an epoch
// that could not register an existing pool again (Attach).
func (c *Core) registerPool(p *pool, again bool) {
	s, epoch := p.spec, c.epoch
	fail := func(err error) {
		if err == errWorkFenced {
			if !again {
				p.failed = fmt.Errorf("core: register pool %q: %w", s.Path, err)
			}
			return
		}
		if !again {
			p.failed = fmt.Errorf("core: %w", err)
			return
		}
		c.requestFence(epoch, Alert{Level: AlertError, Kind: "pool_register_failed", Err: fmt.Errorf("core: attach epoch %d: pool %d: %w; fence it (kill its process, then Fenced) and attach a new transport", epoch, p.id, err)})
	}
	c.emit(Work{Kind: WorkRegisterMemory, Regions: []sdk.Region{{Path: s.Path, Offset: s.Offset, Length: s.BlockSize * uint64(s.Blocks), Kind: sdk.MemoryHost}}}, func(res Result, err error) {
		if err == nil && len(res.Registrations) != 1 {
			err = fmt.Errorf("transport returned %d results for 1 region", len(res.Registrations))
		}
		if err == nil {
			err = res.Registrations[0].Err
		}
		if err != nil {
			if err != errWorkFenced {
				err = fmt.Errorf("register pool %q with epoch %d: %w", s.Path, epoch, err)
			}
			fail(err)
			return
		}
		region := res.Registrations[0].ID
		descs := make([]sdk.Descriptor, s.Blocks)
		for i := range descs {
			descs[i] = sdk.Descriptor{Region: region, Offset: uint64(i) * s.BlockSize, Length: s.BlockSize}
		}
		c.emit(Work{Kind: WorkPrepareDescriptors, Dlists: []sdk.DlistSpec{{Descriptors: descs}}}, func(res Result, err error) {
			if err == errWorkFenced {
				fail(err)
				return
			}
			if err == nil && len(res.DlistResults) != 1 {
				err = fmt.Errorf("transport returned %d results for 1 dlist", len(res.DlistResults))
			}
			if err == nil {
				err = res.DlistResults[0].Err
			}
			if err != nil {
				c.deregister(region)
				fail(fmt.Errorf("prepare the local descriptors of pool %q in epoch %d: %w", s.Path, epoch, err))
				return
			}
			p.epoch, p.region, p.local = epoch, region, res.DlistResults[0].ID
		})
	})
}

// deregister hands out the deregistration of a region whose pool failed to
// register; if it fails the region is kept as stray, released at Close.
func (c *Core) deregister(region sdk.RegionID) {
	epoch := c.epoch
	c.emit(Work{Kind: WorkDeregisterMemory, RegionIDs: []sdk.RegionID{region}}, func(res Result, err error) {
		if err == errWorkFenced {
			return
		}
		if e := itemErr(res.Errs, 0, err); e != nil && !isNotFound(e, err) {
			c.strayRg = append(c.strayRg, strayRegion{epoch, region})
			c.alert(Alert{Level: AlertError, Kind: "pool_rollback_failed", Err: fmt.Errorf("deregister region %d: %w", region, e)})
		}
	})
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
	if p.failed != nil {
		return nil, fmt.Errorf("core: alloc from pool %d: its registration failed: %w", id, p.failed)
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
