package host

import (
	"context"
	"fmt"
	"strings"

	"github.com/custody-dev/custody/host/group"
)

// Peers by name (docs/ranks.md). A RemoteRank's address may name, instead of a
// host:port or a peer of the static list:
//
//   - "etcd:NAME": the host published as NAME in the rank group's
//     directory;
//   - "engine:ENGINE", as the only rank given: every rank of ENGINE, in
//     rank order, each with the rank's pool.
//
// Both need this host to be a rank of a group (a coordinator to ask).
const (
	byHostPrefix   = "etcd:"
	byEnginePrefix = "engine:"
)

// resolveRanks turns names into addresses, off the owner goroutine. wants
// holds, per rank, the host name its certificate must carry ("" where the
// address was given as it is).
func (h *Host) resolveRanks(ctx context.Context, peer string, ranks []RemoteRank) ([]RemoteRank, []string, error) {
	named := false
	for _, r := range ranks {
		named = named || strings.HasPrefix(r.Address, byHostPrefix) || strings.HasPrefix(r.Address, byEnginePrefix)
	}
	wants := make([]string, len(ranks))
	if !named {
		return ranks, wants, nil
	}
	if h.group == nil {
		return nil, nil, fmt.Errorf("peer %q: an address by name (%s or %s) needs a coordinator: configure group with a size above 1, or give host:port addresses", peer, byHostPrefix, byEnginePrefix)
	}
	if len(ranks) == 1 && strings.HasPrefix(ranks[0].Address, byEnginePrefix) {
		engine := strings.TrimPrefix(ranks[0].Address, byEnginePrefix)
		found, err := h.group.LookupEngine(ctx, engine)
		if err != nil {
			return nil, nil, fmt.Errorf("peer %q: %w", peer, err)
		}
		out := make([]RemoteRank, len(found))
		wants = make([]string, len(found))
		for i, p := range found {
			out[i], wants[i] = RemoteRank{Address: p.MetadataAddr, Pool: ranks[0].Pool}, p.Host
		}
		return out, wants, nil
	}
	out := make([]RemoteRank, len(ranks))
	for i, r := range ranks {
		out[i] = r
		switch {
		case strings.HasPrefix(r.Address, byEnginePrefix):
			return nil, nil, fmt.Errorf("peer %q rank %d: %q names an engine: give it as the only rank", peer, i, r.Address)
		case strings.HasPrefix(r.Address, byHostPrefix):
			p, err := h.group.Lookup(ctx, strings.TrimPrefix(r.Address, byHostPrefix))
			if err != nil {
				return nil, nil, fmt.Errorf("peer %q rank %d: %w", peer, i, err)
			}
			out[i].Address, wants[i] = p.MetadataAddr, p.Name
			if p.Host != "" {
				wants[i] = p.Host
			}
		}
	}
	return out, wants, nil
}

// publishByName makes this host findable in its group's directory, under
// its name and as its rank of its engine, both under its lease (they go
// when it does). Called by Serve once the metadata endpoint listens.
func (h *Host) publishByName(ctx context.Context) error {
	if h.group == nil {
		return nil
	}
	info, ok := h.Info()
	if !ok {
		return fmt.Errorf("publish peer %q: %w", h.cfg.Name, ErrRestarting)
	}
	own := group.PeerAddress{Name: h.cfg.Name, MetadataAddr: h.metaAddr, Compat: info.Compat}
	if err := h.group.Publish(ctx, own); err != nil {
		return err
	}
	alias := own
	alias.Name, alias.Host = group.EngineRankName(h.cfg.Group.Engine, h.group.Rank(), h.group.Size()), h.cfg.Name
	return h.group.Publish(ctx, alias)
}
