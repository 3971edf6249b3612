package group

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/host/group/ledger"
)

// Expire ends the wait for the ranks that have not reported each request in
// ids, once the host's hold cap has passed since it reported the request
// itself: waited is how long it has waited (package ledger, expire.go). A
// request resolved meanwhile, or whose pending ranks reported in the
// meantime, is left as it is; the next Resolve returns the outcome. Every
// id must have been reported by this rank (ErrUnknownRequest).
//
// The expiry is written only if no rank still pending in this rank's view
// wrote any states since (its last/<rank> key is older than the view): a
// rank that resolved before the expiry was written saw every state
// present, so the transaction that would write it fails. When a pending
// rank did write since, Expire waits for the view to hold that write and
// looks again, a few times; past them it returns an error matching
// ErrCoordinator (call it again later).
func (g *Group) Expire(ctx context.Context, ids []core.RequestID, waited time.Duration) error {
	if err := g.checkJoined(); err != nil {
		return err
	}
	g.callMu.Lock()
	defer g.callMu.Unlock()
	g.mu.Lock()
	err := g.l.CheckExpire(ids)
	g.mu.Unlock()
	if err != nil || g.cfg.Solo() {
		return err // a solo rank never waits for another
	}
	var lease clientv3.LeaseID // granted for the first expiry to write
	used := false
	defer func() {
		if lease != clientv3.NoLease && !used {
			octx, cancel := g.opCtx(context.WithoutCancel(ctx))
			_, _ = g.cli.Revoke(octx, lease) // else it ends with its TTL
			cancel()
			g.writes.Add(1)
		}
	}()
	for _, id := range ids {
		for attempt := 1; ; attempt++ {
			g.mu.Lock()
			pending, rev, due := g.l.ExpiryDue(id)
			g.mu.Unlock()
			if !due {
				break
			}
			if lease == clientv3.NoLease {
				var err error
				if lease, err = g.grantExpiryLease(ctx, waited); err != nil {
					return err
				}
			}
			wrote, at, err := g.expireAt(ctx, id, pending, rev, waited, lease)
			// An error may hide an expiry written (the transaction ran,
			// its answer was lost): its lease is kept then, to its TTL,
			// since revoking it would delete what some rank may have
			// resolved from already (ledger doc, obligation 5).
			used = used || wrote || err != nil
			if err != nil || wrote {
				if err != nil {
					return err
				}
				break
			}
			if attempt == maxExpireAttempts {
				g.mu.Lock()
				defer g.mu.Unlock()
				return g.l.ExpiryGaveUp(id, attempt)
			}
			// A pending rank wrote since: its state may be in. Look again
			// once the view holds that write.
			if err := g.waitView(ctx, at); err != nil {
				return err
			}
		}
	}
	return nil
}

// maxExpireAttempts bounds the tries of one Expire per request.
const maxExpireAttempts = 3

// grantExpiryLease grants the lease the expiries of one Expire are written
// under (ledger.ExpiryTTLFor).
func (g *Group) grantExpiryLease(ctx context.Context, waited time.Duration) (clientv3.LeaseID, error) {
	octx, cancel := g.opCtx(ctx)
	resp, err := g.cli.Grant(octx, ledger.ExpiryTTLFor(waited))
	cancel()
	g.writes.Add(1)
	if err != nil {
		return clientv3.NoLease, g.wrap("granting the lease of expiries", err)
	}
	return resp.ID, nil
}

// expireAt writes the expiry of id under lease for the ranks pending in
// this rank's view at revision rev, unless one of them wrote states since;
// it says whether it wrote, and etcd's revision. Called with callMu held.
func (g *Group) expireAt(ctx context.Context, id core.RequestID, pending []int, rev int64, waited time.Duration, lease clientv3.LeaseID) (bool, int64, error) {
	g.mu.Lock()
	t := g.l.ExpiryTxn(id, pending, rev, waited, int64(lease))
	g.mu.Unlock()
	res, err := g.run(ctx, t)
	if err != nil {
		return false, 0, g.wrap(t.What, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.l.ExpiryWritten(id, pending, waited, res)
}
