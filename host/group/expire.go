package group

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/custody-dev/custody/core"
)

// A live rank that never reports a request would keep it pending on every
// rank for ever: its lease stays alive, so it is never lost. Expire bounds
// that wait (rule 13). A rank that has waited past its hold cap for
// the others writes an expiry under req/<id>/t/<rank>, in a transaction
// that succeeds only while every rank it saw pending still has no state
// key and this rank is still a member. From then on every rank reads the
// request as TimedOut: the ranks still pending count as timed out, and the
// expiry decides the union even where the late states arrive afterwards
// (a timeout wins over a late success). A rank that resolved before the
// expiry was written saw every state key present, so the transaction that
// would write it fails: no two ranks ever resolve a request differently.

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
	if len(raw) > maxStateRecord || dec.Decode(&rec) != nil || rec.Rank != rank || rec.V != groupProto {
		return expiry{rank: rank, reason: fmt.Sprintf("request %q: rank %d ended the wait past its hold cap (malformed expiry record %.80q: %v)", id, rank, raw, ErrMalformed)}
	}
	return expiry{rank: rank, reason: fmt.Sprintf("request %q: rank %d waited %s past its hold cap for ranks %v that never reported it", id, rank, rec.Waited, rec.Pending)}
}

// Expire ends the wait for the ranks that have not reported each request in
// ids (as the last Resolve saw them), once the host's hold cap has passed
// since it reported the request itself: waited is how long it has waited.
// A request resolved meanwhile, or whose pending ranks reported in the
// meantime, is left as it is; the next Resolve returns the outcome. Every id
// must have been reported by this rank (ErrUnknownRequest).
func (g *Group) Expire(ctx context.Context, ids []core.RequestID, waited time.Duration) error {
	if err := g.checkJoined(); err != nil {
		return err
	}
	g.reqMu.Lock()
	defer g.reqMu.Unlock()
	for _, id := range ids {
		if err := checkRequestID(id); err != nil {
			return fmt.Errorf("group %q rank %d: expire: %w", g.cfg.Engine, g.cfg.Rank, err)
		}
		if g.reqs.m[id] == nil {
			return fmt.Errorf("group %q rank %d: expire: request %q: %w: report its local terminal state first", g.cfg.Engine, g.cfg.Rank, id, ErrUnknownRequest)
		}
	}
	if g.cfg.Solo() {
		return nil // a solo rank never waits for another
	}
	memberKey := g.keys.member(g.cfg.Rank)
	guard := clientv3.Compare(clientv3.LeaseValue(memberKey), "=", g.lease)
	for _, id := range ids {
		r := g.reqs.m[id]
		if r.out != nil || len(r.last.Pending) == 0 {
			continue
		}
		ifs := []clientv3.Cmp{guard}
		for _, p := range r.last.Pending {
			ifs = append(ifs, clientv3.Compare(clientv3.CreateRevision(g.keys.state(string(id), p)), "=", 0))
		}
		raw, _ := json.Marshal(expiryRecord{V: groupProto, Rank: g.cfg.Rank, Member: g.member, Pending: r.last.Pending, Waited: waited.Round(time.Millisecond).String()})
		octx, cancel := g.opCtx(ctx)
		_, err := g.cli.Txn(octx).If(ifs...).Then(clientv3.OpPut(g.keys.expiry(string(id), g.cfg.Rank), string(raw))).Commit()
		cancel()
		g.reqs.writes.Add(1)
		if err != nil {
			return g.wrap(fmt.Sprintf("expiring request %q", id), err)
		}
		g.log.Warn("group_request_expired", "request", id, "pending", fmt.Sprint(r.last.Pending), "waited", waited)
	}
	return nil
}
