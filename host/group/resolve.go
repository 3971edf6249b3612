package group

import (
	"context"

	"github.com/custody-dev/custody/core"
)

// Outcome resolves one request as of now: it Syncs, then Resolves.
func (g *Group) Outcome(ctx context.Context, id core.RequestID) (Outcome, error) {
	if err := g.Sync(ctx); err != nil {
		return Outcome{}, err
	}
	out, err := g.Resolve(ctx, []core.RequestID{id})
	if err != nil {
		return Outcome{}, err
	}
	return out[0], nil
}

// Resolve returns the union outcome of each request, in order, as this
// rank's watch of the group has seen every rank's state: it reads no etcd
// (call Sync first to see every state reported before the call; a host
// waits on Changed instead, which the watch signals). A request is
// Resolved once every rank has reported it terminal or is lost (its lease
// gone, or its member replaced, since this rank reported it); until then
// it is pending. A resolved outcome is final: Resolve returns it again
// unchanged, and the deletions it allows go out with the next Report.
//
// Every id must have been reported by this rank first (ErrUnknownRequest);
// a bad id fails the whole call and changes nothing.
func (g *Group) Resolve(ctx context.Context, ids []core.RequestID) ([]Outcome, error) {
	if err := g.checkJoined(); err != nil {
		return nil, err
	}
	g.callMu.Lock()
	defer g.callMu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.l.Resolve(ids)
}
