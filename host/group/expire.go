package group

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/host/group/ledger"
)

// A live rank that never reports a request would keep it pending on every
// rank for ever: its lease stays alive, so it is never lost. Expire bounds
// that wait (rule 13). A rank that has waited past its hold cap for
// the others writes an expiry under req/<id>/t/<rank>, in a transaction
// that succeeds only while no rank it saw pending has written any states
// since (their last/<rank> keys) and this rank is still a member. From then on every rank reads the
// request as TimedOut: the ranks still pending count as timed out, and the
// expiry decides the union even where the late states arrive afterwards
// (a timeout wins over a late success). A rank that resolved before the
// expiry was written saw every state key present, so the transaction that
// would write it fails: no two ranks ever resolve a request differently.
//
// Nothing needs the states records of an expired request any more: each
// rank deletes its own once every other request in it is complete, as if
// the ranks the expiry found pending had reported (outcome.go). The
// expiry outlives them. The lowest live rank deletes it once every live
// rank's state is in; a rank that never reports leaves it to its lease,
// which ends expiryTTL after it was written (at least ten times the wait
// that led to it). A silent rank that reports before then finds the
// expiry and resolves the request TimedOut like the others; one that
// reports later finds no key of the request at all, waits out its own
// hold cap and expires it in turn, TimedOut again. Only a rank reporting
// past expiryTTL while another rank's record naming the request is still
// in etcd could resolve it differently, and such a record outlives the
// expiry only while another request in it stays unresolved and unexpired
// for that long.

// expiryTTL is the least time an expiry stays in etcd when a rank it names
// never reports.
const expiryTTL = time.Hour

// expiryTTLFor is how long the lease of an expiry written after waiting
// waited lasts, in whole seconds: expiryTTL, or ten times waited.
func expiryTTLFor(waited time.Duration) int64 {
	return int64(max(expiryTTL, 10*waited).Round(time.Second) / time.Second)
}

// maxExpiryRecord bounds an expiry record read from etcd.
const maxExpiryRecord = 1024

// expiry is one expiry record as read.
type expiry struct {
	rank   int
	reason string
}

// expiryRecord is what req/<id>/t/<rank> holds.
type expiryRecord struct {
	V       int    `json:"v"`
	Rank    int    `json:"rank"`
	Member  string `json:"member"`
	Pending []int  `json:"pending"`
	Waited  string `json:"waited"`
}

// decodeExpiry reads an expiry record. A malformed one still expires the
// request, as a timeout of the rank whose key holds it: an expiry fails
// safe.
func decodeExpiry(id core.RequestID, raw []byte, rank int) expiry {
	var rec expiryRecord
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if len(raw) > maxExpiryRecord || dec.Decode(&rec) != nil || rec.Rank != rank || rec.V != ledger.Proto {
		return expiry{rank: rank, reason: fmt.Sprintf("request %q: rank %d ended the wait past its hold cap (malformed expiry record %.80q: %v)", id, rank, raw, ErrMalformed)}
	}
	return expiry{rank: rank, reason: fmt.Sprintf("request %q: rank %d waited %s past its hold cap for ranks %v that never reported it", id, rank, rec.Waited, rec.Pending)}
}

// Expire ends the wait for the ranks that have not reported each request in
// ids, once the host's hold cap has passed since it reported the request
// itself: waited is how long it has waited. A request resolved meanwhile,
// or whose pending ranks reported in the meantime, is left as it is; the
// next Resolve returns the outcome. Every id must have been reported by
// this rank (ErrUnknownRequest).
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
	g.reqMu.Lock()
	defer g.reqMu.Unlock()
	for _, id := range ids {
		if err := ledger.CheckRequestID(id); err != nil {
			return fmt.Errorf("group %q rank %d: expire: %w", g.cfg.Engine, g.cfg.Rank, err)
		}
		if g.reqs.m[id] == nil {
			return fmt.Errorf("group %q rank %d: expire: request %q: %w: report its local terminal state first", g.cfg.Engine, g.cfg.Rank, id, ErrUnknownRequest)
		}
	}
	if g.cfg.Solo() {
		return nil // a solo rank never waits for another
	}
	var lease clientv3.LeaseID // granted for the first expiry to write
	used := false
	defer func() {
		if lease != clientv3.NoLease && !used {
			octx, cancel := g.opCtx(context.WithoutCancel(ctx))
			_, _ = g.cli.Revoke(octx, lease) // else it ends with its TTL
			cancel()
			g.reqs.writes.Add(1)
		}
	}()
	for _, id := range ids {
		r := g.reqs.m[id]
		for attempt := 1; ; attempt++ {
			// Fold what the view holds now, and remember up to which
			// revision it holds every write.
			g.rv.mu.Lock()
			if r.out == nil {
				g.apply(id, r, g.rv.reqs[id], g.members())
			}
			rev := g.rv.rev
			g.rv.mu.Unlock()
			if r.out != nil || len(r.last.Pending) == 0 {
				break
			}
			if lease == clientv3.NoLease {
				var err error
				if lease, err = g.grantExpiryLease(ctx, waited); err != nil {
					return err
				}
			}
			wrote, at, err := g.expireAt(ctx, id, r.last.Pending, rev, waited, lease)
			used = used || wrote
			if err != nil || wrote {
				if err != nil {
					return err
				}
				break
			}
			if attempt == maxExpireAttempts {
				return fmt.Errorf("group %q rank %d: expiring request %q: ranks %v wrote states after each of %d views of them: %w; expire it again later", g.cfg.Engine, g.cfg.Rank, id, r.last.Pending, attempt, ErrCoordinator)
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

// grantExpiryLease grants the lease the expiries of one Expire are written
// under (expiryTTLFor).
func (g *Group) grantExpiryLease(ctx context.Context, waited time.Duration) (clientv3.LeaseID, error) {
	octx, cancel := g.opCtx(ctx)
	resp, err := g.cli.Grant(octx, expiryTTLFor(waited))
	cancel()
	g.reqs.writes.Add(1)
	if err != nil {
		return clientv3.NoLease, g.wrap("granting the lease of expiries", err)
	}
	return resp.ID, nil
}

// expireAt writes the expiry of id under lease for the ranks pending in
// this rank's view at revision rev, unless one of them wrote states since;
// it says whether it wrote, and etcd's revision. Called with reqMu held.
func (g *Group) expireAt(ctx context.Context, id core.RequestID, pending []int, rev int64, waited time.Duration, lease clientv3.LeaseID) (bool, int64, error) {
	memberKey := g.keys.Member(g.cfg.Rank)
	ifs := []clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(memberKey), "=", g.lease)}
	for _, p := range pending {
		ifs = append(ifs, clientv3.Compare(clientv3.ModRevision(g.keys.Last(p)), "<", rev+1))
	}
	raw, _ := json.Marshal(expiryRecord{V: ledger.Proto, Rank: g.cfg.Rank, Member: g.member, Pending: pending, Waited: waited.Round(time.Millisecond).String()})
	octx, cancel := g.opCtx(ctx)
	resp, err := g.cli.Txn(octx).If(ifs...).Then(clientv3.OpPut(g.keys.Expiry(string(id), g.cfg.Rank), string(raw), clientv3.WithLease(lease))).Else(clientv3.OpGet(memberKey)).Commit()
	cancel()
	g.reqs.writes.Add(1)
	if err != nil {
		return false, 0, g.wrap(fmt.Sprintf("expiring request %q", id), err)
	}
	if resp.Succeeded {
		g.log.Warn("group_request_expired", "request", id, "pending", fmt.Sprint(pending), "waited", waited)
		return true, resp.Header.Revision, nil
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 0 || clientv3.LeaseID(kvs[0].Lease) != g.lease {
		return false, 0, fmt.Errorf("group %q rank %d: expiring request %q: this rank's membership key is gone: %w; fail every request and restart the host", g.cfg.Engine, g.cfg.Rank, id, ErrSessionLost)
	}
	return false, resp.Header.Revision, nil
}

// maxExpireAttempts bounds the tries of one Expire per request.
const maxExpireAttempts = 3
