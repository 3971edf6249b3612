package host

import (
	"context"
	"fmt"
	"time"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/sdk"
)

// handshakeTimeout bounds fetching a peer's metadata from all its ranks.
const handshakeTimeout = 10 * time.Second

// RemoteRank is one rank of a peer: the address of the host serving it (or
// the name of a peer in the config's static list) and the name of its pool
// that remote block ids index.
type RemoteRank struct {
	Address string
	Pool    string
}

// link is how the engine asked to reach a peer; the host connects it again
// on demand after a fence or after the peer restarted.
type link struct {
	ranks   []RemoteRank
	pending bool     // a handshake runs in the background
	tries   attempts // its failed attempts (handshake_backoff.go)
}

// connectPeer records how to reach a peer and starts its handshake.
func (h *Host) connectPeer(name string, ranks []RemoteRank) error {
	if name == "" {
		return fmt.Errorf("connect peer: name is empty")
	}
	if name == h.cfg.Name {
		return fmt.Errorf("connect peer %q: that is this host's own name", name)
	}
	if len(ranks) == 0 {
		return fmt.Errorf("connect peer %q: no ranks; give one address and pool per remote rank", name)
	}
	for i, r := range ranks {
		if r.Address == "" || r.Pool == "" {
			return fmt.Errorf("connect peer %q: rank %d: address and pool are both required", name, i)
		}
	}
	old := h.links[name]
	if old != nil && (old.pending || h.core.Connected(name)) {
		if equalRanks(old.ranks, ranks) {
			return nil
		}
		return fmt.Errorf("connect peer %q: already connected or connecting with other ranks; remove it first", name)
	}
	// A link whose attempts failed is replaced (with these ranks, which may
	// correct it): its attempt starts at once, its backoff anew; only a
	// failure that differs from the one logged is logged again, and the
	// recovery is logged.
	l := &link{ranks: append([]RemoteRank(nil), ranks...)}
	if old != nil && old.tries.failures > 0 {
		l.tries.failures, l.tries.logged = old.tries.failures, old.tries.logged
		h.failing[name] = l
	}
	h.links[name] = l
	return h.ensurePeer(name)
}

func equalRanks(a, b []RemoteRank) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// ensurePeer starts a background handshake with a peer that core does not
// have connected, unless one already runs. Requests for the peer wait in
// core meanwhile. Within the backoff of a failed attempt it starts none
// and returns that attempt's failure (handshake_backoff.go).
func (h *Host) ensurePeer(name string) error {
	l := h.links[name]
	if l == nil {
		return fmt.Errorf("peer %q is not connected; call ConnectPeer first", name)
	}
	if l.pending || h.core.Connected(name) || h.core.Handshaking(name) {
		return nil
	}
	if err := l.tries.refusal(time.Now()); err != nil {
		return err
	}
	info, ok := h.Info()
	if !ok {
		return fmt.Errorf("peer %q: %w", name, ErrRestarting)
	}
	l.pending = true
	ranks := append([]RemoteRank(nil), l.ranks...)
	h.bg.Add(1)
	go func() {
		defer h.bg.Done()
		ctx, cancel := context.WithTimeout(h.bgCtx, handshakeTimeout)
		defer cancel()
		spec, err := h.fetchPeer(ctx, name, ranks, info.Compat)
		select {
		case h.handshakes <- handshake{name: name, spec: spec, err: err}:
		case <-h.bgCtx.Done():
		}
	}()
	return nil
}

// handshake is what a background handshake hands the owner goroutine.
type handshake struct {
	name string
	spec core.PeerSpec
	err  error
}

// settle connects a peer whose metadata a background handshake fetched, or
// fails the requests waiting for it; either way the handshake is over. It
// runs on the owner goroutine, so the peer is connected (or not) before any
// other engine call is served.
func (h *Host) settle(hs handshake) {
	l := h.links[hs.name]
	if l == nil {
		return // removed meanwhile: RemovePeer failed the requests waiting for it
	}
	l.pending = false
	if hs.err == nil && h.tp == nil {
		hs.err = fmt.Errorf("peer %q: %w", hs.name, ErrRestarting)
	}
	if hs.err != nil {
		h.core.Inbox().HandshakeFailed(hs.name, hs.err)
		return
	}
	if err := h.core.ConnectPeer(hs.spec); err != nil {
		h.core.Inbox().HandshakeFailed(hs.name, err) // fails whatever still waits; its alert records the attempt
	}
}

// fetchPeer fetches every rank's metadata, refuses an incompatible one, and
// builds core's PeerSpec. It runs off the owner goroutine and touches no
// host state.
func (h *Host) fetchPeer(ctx context.Context, name string, ranks []RemoteRank, compat string) (core.PeerSpec, error) {
	spec := core.PeerSpec{Name: name}
	ranks, wants, err := h.resolveRanks(ctx, name, ranks)
	if err != nil {
		return spec, err
	}
	for i, r := range ranks {
		// The host asked for: a peer of the static list when the address
		// names one, a host found by name in the group's directory, else
		// the peer itself.
		addr, want := r.Address, name
		if wants[i] != "" {
			want = wants[i]
		}
		for _, p := range h.cfg.Peers {
			if p.Name == addr {
				addr, want = p.Address, p.Name
			}
		}
		if h.trust == nil {
			return spec, fmt.Errorf("peer %q: this host has no TLS identity (start it with Serve)", name)
		}
		pi, err := FetchPeerInfo(ctx, addr, want, h.trust.clientTLS(want))
		if err != nil {
			return spec, fmt.Errorf("peer %q rank %d: %w", name, i, err)
		}
		if err := pi.CheckCompat(compat); err != nil {
			return spec, fmt.Errorf("peer %q rank %d: %w", name, i, err)
		}
		var pool *PoolLayout
		for k := range pi.Pools {
			if pi.Pools[k].Name == r.Pool {
				pool = &pi.Pools[k]
			}
		}
		if pool == nil {
			return spec, fmt.Errorf("peer %q rank %d: host %s has no pool %q", name, i, pi.Name, r.Pool)
		}
		spec.Ranks = append(spec.Ranks, core.RankSpec{
			Agent: pi.Agent, Metadata: pi.Metadata, Region: sdk.RegionID(pool.Region),
			BlockSize: pool.BlockSize, Blocks: uint32(pool.Blocks),
		})
	}
	return spec, nil
}

// dropStalePeer removes a peer whose transfers report a disconnect: its
// process or its transport restarted, so its metadata is stale. Its running
// transfers are retired; the next request connects it again. It reports
// whether it removed the peer.
func (h *Host) dropStalePeer(name string) bool {
	if !h.core.Connected(name) {
		return false
	}
	if err := h.core.RemovePeer(time.Now(), name); err != nil {
		h.log.Warn("remove stale peer", "failure_type", "peer_remove_failed", "peer", name, "error", err.Error())
		return false
	}
	h.log.Warn("peer disconnected; it will be connected again on the next request", "failure_type", "peer_disconnected", "peer", name)
	return true
}

// listed reports whether Status lists a link: while it is connected or its
// handshake runs. A link whose handshake failed is kept (the next request
// for the peer tries again) but not listed, so a peer that was never
// reached does not stay in Status.
func (h *Host) listed(name string, l *link) bool {
	return l.pending || h.core.Connected(name)
}
