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
// on demand after a fence or after the peer restarted, and retries a
// failed attempt with backoff (handshake_retry.go).
type link struct {
	ranks   []RemoteRank
	pending bool // an attempt's fetch runs in the background, or waits for its backoff
	native  bool // an attempt's native half runs in core
	gen     uint64
	stop    context.CancelFunc // ends the pending fetch
	// fail is the last attempt's failure, until an attempt succeeds or
	// ConnectPeer starts afresh; delay the backoff before the attempt that
	// follows it, failures how many failed in a row, logged the failure
	// logged last (its failureKey; "" once recovered).
	fail     *handshakeError
	delay    time.Duration
	failures int
	logged   string
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
	l, ok := h.links[name]
	if !ok {
		h.links[name] = &link{ranks: append([]RemoteRank(nil), ranks...)}
		return h.ensurePeer(name)
	}
	same := equalRanks(l.ranks, ranks)
	if h.core.Connected(name) || (l.fail == nil && (l.pending || l.native)) {
		if same {
			return nil
		}
		return fmt.Errorf("connect peer %q: already connected or connecting with other ranks; remove it first", name)
	}
	// Idle (dropped as stale) or failing: start afresh, now.
	if l.native && !same {
		return fmt.Errorf("connect peer %q: an attempt of its handshake with the ranks given before runs in the transport: %w", name, ErrConnecting)
	}
	h.resetLink(l)
	l.ranks = append([]RemoteRank(nil), ranks...)
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
// have connected, unless an attempt already runs or waits for its backoff.
// Requests for the peer wait in core meanwhile.
func (h *Host) ensurePeer(name string) error {
	l := h.links[name]
	if l == nil {
		return fmt.Errorf("peer %q is not connected; call ConnectPeer first", name)
	}
	if l.pending || l.native || h.core.Connected(name) {
		return nil
	}
	if h.core.Handshaking(name) {
		h.setNative(l, true) // of a link removed before: its end starts this one's
		return nil
	}
	if _, ok := h.Info(); !ok {
		return fmt.Errorf("peer %q: %w", name, ErrRestarting)
	}
	h.attempt(name, l, 0)
	return nil
}

// handshake is what a background handshake hands the owner goroutine: the
// outcome of attempt gen's fetch.
type handshake struct {
	name string
	gen  uint64
	spec core.PeerSpec
	err  error
}

// settle connects a peer whose metadata a background handshake fetched, or
// records the attempt's failure and fails the requests waiting for it. It
// runs on the owner goroutine, so the peer is connected (or not) before any
// other engine call is served. A result of an attempt ended meanwhile
// (RemovePeer, ConnectPeer) is dropped.
func (h *Host) settle(hs handshake) {
	l := h.links[hs.name]
	if l == nil || l.gen != hs.gen {
		return // removed (RemovePeer failed the requests waiting) or started afresh (they wait for that attempt)
	}
	l.pending, l.stop = false, nil
	if hs.err == nil && h.tp == nil {
		hs.err = fmt.Errorf("peer %q: %w", hs.name, ErrRestarting)
	}
	if hs.err == nil {
		hs.err = h.core.ConnectPeer(hs.spec)
	}
	if hs.err != nil {
		h.attemptFailed(hs.name, l, hs.err)
		h.core.Inbox().HandshakeFailed(hs.name, l.fail) // fails whatever waits
		return
	}
	h.setNative(l, true)
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
// transfers are retired; the next request connects it again.
func (h *Host) dropStalePeer(name string) {
	if !h.core.Connected(name) {
		return
	}
	if err := h.core.RemovePeer(time.Now(), name); err != nil {
		h.log.Warn("remove stale peer", "failure_type", "peer_remove_failed", "peer", name, "error", err.Error())
		return
	}
	h.log.Warn("peer disconnected; it will be connected again on the next request", "failure_type", "peer_disconnected", "peer", name)
}

// listed reports whether Status lists a link: while it is connected or its
// first attempt runs. A link whose attempt failed is kept (the host retries
// it) but not listed, so a peer that was never reached does not stay in
// Status.
func (h *Host) listed(name string, l *link) bool {
	return h.core.Connected(name) || (l.fail == nil && (l.pending || l.native))
}
