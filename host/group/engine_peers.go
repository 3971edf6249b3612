package group

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/custody-dev/custody/host/group/ledger"
)

// EngineRankName is the directory name under which a host publishes itself
// as rank of an engine of size ranks ("prefill#1/2"), so that a peer can
// connect to the whole engine by its name (LookupEngine).
func EngineRankName(engine string, rank, size int) string {
	return engine + "#" + strconv.Itoa(rank) + "/" + strconv.Itoa(size)
}

// LookupEngine finds every rank of a published engine, in rank order. Each
// record names its rank and the engine's size; the ranks must agree on the
// size and all be published, else the error names what is missing.
func (g *Group) LookupEngine(ctx context.Context, engine string) ([]PeerAddress, error) {
	if !engineName.MatchString(engine) {
		return nil, fmt.Errorf("engine name %.40q: %w", engine, ErrBadArgument)
	}
	if err := g.checkOpen(); err != nil {
		return nil, err
	}
	if g.cfg.Solo() {
		return nil, fmt.Errorf("engine %q: %w: a group of size 1 has no coordinator; configure the peer's addresses statically", engine, ErrPeerNotFound)
	}
	prefix := ledger.PeerKey(engine + "#")
	octx, cancel := g.opCtx(ctx)
	defer cancel()
	resp, err := g.cli.Get(octx, prefix, clientv3.WithPrefix(), clientv3.WithLimit(MaxSize+1))
	if err != nil {
		return nil, g.wrap(fmt.Sprintf("looking up engine %q", engine), err)
	}
	size := -1
	var byRank map[int]string
	for _, kv := range resp.Kvs {
		name, err := url.PathUnescape(strings.TrimPrefix(string(kv.Key), ledger.PeersPrefix))
		if err != nil {
			continue
		}
		rs, ss, ok := strings.Cut(strings.TrimPrefix(name, engine+"#"), "/")
		n, err := strconv.Atoi(ss)
		if !ok || err != nil || n < 1 || n > MaxSize {
			return nil, fmt.Errorf("engine %q: directory entry %.80q does not name rank/size: %w", engine, name, ErrMalformed)
		}
		r, err := ledger.ParseRank(rs, n)
		if err != nil {
			return nil, fmt.Errorf("engine %q: directory entry %.80q: %v: %w", engine, name, err, ErrMalformed)
		}
		if size == -1 {
			size, byRank = n, map[int]string{}
		} else if n != size {
			return nil, fmt.Errorf("engine %q: its ranks publish sizes %d and %d: %w; restart them with one group size", engine, size, n, ErrMalformed)
		}
		byRank[r] = name
	}
	if size == -1 {
		return nil, fmt.Errorf("engine %q: %w: no rank of it is running, or none has published yet; retry", engine, ErrPeerNotFound)
	}
	out := make([]PeerAddress, size)
	for r := range size {
		name, ok := byRank[r]
		if !ok {
			return nil, fmt.Errorf("engine %q: rank %d of %d is not published: %w; it is not running or has not published yet; retry", engine, r, size, ErrPeerNotFound)
		}
		if out[r], err = g.Lookup(ctx, name); err != nil {
			return nil, err
		}
	}
	return out, nil
}
