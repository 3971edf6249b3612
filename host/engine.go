package host

import (
	"context"
	"fmt"
	"time"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/sdk"
)

// The engine API in Go: each method runs on the owner goroutine. Bad input
// is an error that changes nothing.

// RegisterPool registers a pool of the engine's memory and publishes its
// layout to peers.
func (h *Host) RegisterPool(ctx context.Context, name string, spec core.PoolSpec) (core.PoolID, error) {
	var id core.PoolID
	err := h.do(ctx, func(ctx context.Context) (err error) {
		id, err = h.registerPool(ctx, name, spec)
		return err
	})
	return id, err
}

func (h *Host) registerPool(ctx context.Context, name string, spec core.PoolSpec) (core.PoolID, error) {
	if name == "" {
		return 0, fmt.Errorf("register pool: name is empty")
	}
	if h.group != nil && len(h.pools) == len(h.cfg.Pools) {
		return 0, fmt.Errorf("register pool %q: this host is rank %d of a group of %d, whose ranks agreed on their pools at startup: configure it under pools on every rank: %w", name, h.group.Rank(), h.group.Size(), sdk.ErrBusy)
	}
	for _, p := range h.pools {
		if p.name == name {
			return 0, fmt.Errorf("register pool %q: a pool of that name exists", name)
		}
	}
	id, err := h.core.RegisterPool(spec)
	if err != nil {
		return 0, err
	}
	h.pools = append(h.pools, poolEntry{name: name, spec: spec})
	h.absorb(h.core.Ready())
	if err := h.await(ctx, func() bool { ok, err := h.core.PoolReady(id); return ok || err != nil }); err != nil {
		return 0, fmt.Errorf("register pool %q: %w", name, err)
	}
	if _, err := h.core.PoolReady(id); err != nil {
		return 0, err
	}
	return id, h.publish(ctx)
}

// Alloc takes n free blocks of a pool for the engine.
func (h *Host) Alloc(ctx context.Context, pool core.PoolID, n int) ([]uint32, error) {
	var blocks []uint32
	err := h.do(ctx, func(context.Context) (err error) {
		if h.ranks != nil && int(pool) >= 1 && int(pool) <= len(h.pools) {
			if why, ok := h.ranks.isPoisoned(h.pools[pool-1].name); ok {
				return fmt.Errorf("alloc from pool %q: %w on every rank of the group (%s)", h.pools[pool-1].name, ErrPoisoned, why)
			}
		}
		blocks, err = h.core.Alloc(pool, n)
		return err
	})
	return blocks, err
}

// Free gives engine blocks back to the pool's free list.
func (h *Host) Free(ctx context.Context, pool core.PoolID, blocks []uint32) error {
	return h.do(ctx, func(context.Context) error { return h.core.Free(pool, blocks) })
}

// ConnectPeer records how to reach a peer's ranks and starts its handshake
// in the background; requests for the peer wait for it.
func (h *Host) ConnectPeer(ctx context.Context, name string, ranks []RemoteRank) error {
	return h.doWork(ctx, func(context.Context) error { return h.connectPeer(name, ranks) })
}

// RemovePeer retires a peer: its running transfers are retained, its native
// resources released once none uses them.
func (h *Host) RemovePeer(ctx context.Context, name string) error {
	return h.doWork(ctx, func(ctx context.Context) error {
		if _, ok := h.links[name]; !ok {
			return fmt.Errorf("remove peer %q: not connected", name)
		}
		connected := h.core.Connected(name)
		delete(h.links, name)
		// Also fails requests still waiting for a handshake of the peer. A
		// link whose handshake never finished leaves core nothing to retire.
		if err := h.core.RemovePeer(time.Now(), name); err != nil && connected {
			return fmt.Errorf("remove peer %q: %w", name, err)
		}
		return nil
	})
}

// Read pulls a request's blocks from a peer.
func (h *Host) Read(ctx context.Context, spec core.ReadSpec) error {
	return h.doWork(ctx, func(ctx context.Context) error {
		if err := h.admit(spec.Request, partPools(spec.Parts)...); err != nil {
			return fmt.Errorf("read: %w", err)
		}
		if err := h.ensurePeer(spec.Peer); err != nil {
			return fmt.Errorf("read request %q: %w", spec.Request, err)
		}
		if err := h.core.Read(time.Now(), spec); err != nil {
			return err
		}
		h.track(spec.Request, reqInfo{peer: spec.Peer, op: "read", bytes: h.partBytes(spec.Parts), recv: true}, 0, nil, spec.Parts)
		return nil
	})
}

// Write pushes a request's blocks to a peer.
func (h *Host) Write(ctx context.Context, spec core.WriteSpec) error {
	return h.doWork(ctx, func(ctx context.Context) error {
		if err := h.admit(spec.Request, partPools(spec.Parts)...); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		if err := h.ensurePeer(spec.Peer); err != nil {
			return fmt.Errorf("write request %q: %w", spec.Request, err)
		}
		if err := h.core.Write(time.Now(), spec); err != nil {
			return err
		}
		h.track(spec.Request, reqInfo{peer: spec.Peer, op: "write", bytes: h.partBytes(spec.Parts)}, 0, nil, spec.Parts)
		return nil
	})
}

// ExpectSend pins blocks peers will read until they are consumed or the
// lease expires.
func (h *Host) ExpectSend(ctx context.Context, spec core.SendSpec) error {
	return h.doWork(ctx, func(context.Context) error {
		if err := h.admit(spec.Request, spec.Pool); err != nil {
			return fmt.Errorf("expect send: %w", err)
		}
		if err := h.core.ExpectSend(time.Now(), spec); err != nil {
			return err
		}
		h.track(spec.Request, reqInfo{peer: spec.Peer}, spec.Pool, spec.Blocks, nil)
		return nil
	})
}

// ExpectReceive pins blocks a connected peer will write (push mode, consumer
// side) until its written notifications arrive or the lease expires. A peer
// not connected yet is connected first: retry on ErrRestarting.
func (h *Host) ExpectReceive(ctx context.Context, spec core.RecvSpec) error {
	return h.doWork(ctx, func(context.Context) error {
		if err := h.admit(spec.Request, spec.Pool); err != nil {
			return fmt.Errorf("expect receive: %w", err)
		}
		if !h.core.Connected(spec.Peer) {
			if err := h.ensurePeer(spec.Peer); err != nil {
				return fmt.Errorf("expect receive %q: %w", spec.Request, err)
			}
			if l := h.links[spec.Peer]; l != nil && l.tries.last != nil {
				// Another attempt runs; the last one's failure is what is known.
				return fmt.Errorf("expect receive %q: %w", spec.Request, l.tries.last)
			}
			return fmt.Errorf("expect receive %q: peer %q: %w", spec.Request, spec.Peer, ErrConnecting)
		}
		if err := h.core.ExpectReceive(time.Now(), spec); err != nil {
			return err
		}
		h.track(spec.Request, reqInfo{peer: spec.Peer, op: "receive", bytes: uint64(len(spec.Blocks)) * h.blockSize(spec.Pool), recv: true}, spec.Pool, spec.Blocks, nil)
		return nil
	})
}

// GetFinished returns what finished since the last call and acknowledges
// it; every request appears in exactly one report. It reads the report log
// (finished.go) directly, never waiting for the owner's transport work.
func (h *Host) GetFinished(ctx context.Context) (Finished, error) {
	if err := ctx.Err(); err != nil {
		return Finished{}, err
	}
	return h.rep.take(0).Finished, nil
}

// Status is a snapshot of what the host holds.
type Status struct {
	Name      string
	Transport string
	Epoch     uint64
	Stats     core.Stats
	Peers     []string
	// Fences and Restarts count transport processes killed and started
	// again since the host started.
	Fences, Restarts uint64
	// Native is what the running transport holds natively (zero while it
	// restarts, or when it could not be asked).
	Native sdk.Resources
	// TransportPid is the transport process, 0 while it restarts.
	TransportPid int
	// Group is this host's rank group (nil when it decides alone).
	Group *GroupStatus
	// Incarnation is this host process's, which its report cursors carry.
	Incarnation uint64
	// EngineRefused counts the engine socket connections refused because
	// engine.max_connections were open (0 when the host serves no socket).
	EngineRefused uint64
}

// GroupStatus is a ranked host's view of its group.
type GroupStatus struct {
	Engine     string
	Rank, Size int
	// Live is, per rank, whether its membership is alive now.
	Live []bool
	// Poisoned lists the pools poisoned on every rank (rule 11).
	Poisoned []string
	// Held counts requests finished here and waiting for the other ranks;
	// UnionFailed those that succeeded here and failed on another rank;
	// Expired those this rank expired past the hold cap.
	Held, UnionFailed, Expired uint64
	// Writes and Reads count the etcd transactions of the union.
	Writes, Reads uint64
}

// Status reports what the host holds now.
func (h *Host) Status(ctx context.Context) (Status, error) {
	var s Status
	var tp interface {
		Resources(context.Context) (sdk.Resources, error)
	}
	err := h.do(ctx, func(context.Context) error {
		s = Status{Name: h.cfg.Name, Transport: h.desc.Name, Epoch: uint64(h.epoch), Stats: h.core.Stats(), Fences: h.fences, Restarts: h.restarts,
			Incarnation: h.rep.incarnation()}
		if ln := h.engineLn.Load(); ln != nil {
			s.EngineRefused = ln.refused.Load()
		}
		if h.tp != nil {
			s.TransportPid = h.tp.Pid()
			tp = h.tp
		}
		for name, l := range h.links {
			if h.listed(name, l) { // peers.go
				s.Peers = append(s.Peers, name)
			}
		}
		s.Group = h.groupStatus()
		return nil
	})
	if err != nil || tp == nil {
		return s, err
	}
	// Asked off the owner goroutine, so engine calls never wait for it.
	rctx, cancel := context.WithTimeout(ctx, h.cfg.Transport.CallTimeout)
	defer cancel()
	if r, err := tp.Resources(rctx); err == nil {
		s.Native = r
	}
	return s, nil
}

func (h *Host) partBytes(parts []core.Part) uint64 {
	var n uint64
	for _, p := range parts {
		n += uint64(len(p.Local)) * h.blockSize(p.Pool)
	}
	return n
}

func (h *Host) blockSize(id core.PoolID) uint64 {
	if int(id) >= 1 && int(id) <= len(h.pools) {
		return h.pools[id-1].spec.BlockSize
	}
	return 0
}
