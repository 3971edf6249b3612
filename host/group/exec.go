package group

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/custody-dev/custody/host/group/ledger"
)

// run runs one transaction the ledger planned, bounded by the op timeout,
// and counts it. An error is etcd's, unwrapped.
func (g *Group) run(ctx context.Context, t ledger.Txn) (ledger.Result, error) {
	ifs := make([]clientv3.Cmp, len(t.If))
	for i, c := range t.If {
		ifs[i] = cmpOf(c)
	}
	octx, cancel := g.opCtx(ctx)
	resp, err := g.cli.Txn(octx).If(ifs...).Then(opsOf(t.Then)...).Else(opsOf(t.Else)...).Commit()
	cancel()
	g.writes.Add(1)
	if err != nil {
		return ledger.Result{}, err
	}
	res := ledger.Result{Succeeded: resp.Succeeded, Rev: resp.Header.Revision, Ranges: make([][]ledger.KV, len(resp.Responses))}
	for i, r := range resp.Responses {
		if rr := r.GetResponseRange(); rr != nil {
			res.Ranges[i] = kvsOf(rr.Kvs)
		}
	}
	return res, nil
}

func cmpOf(c ledger.Cmp) clientv3.Cmp {
	switch c.Target {
	case ledger.CmpLease:
		return clientv3.Compare(clientv3.LeaseValue(c.Key), c.Op, clientv3.LeaseID(c.Value))
	case ledger.CmpCreated:
		return clientv3.Compare(clientv3.CreateRevision(c.Key), c.Op, c.Value)
	default:
		return clientv3.Compare(clientv3.ModRevision(c.Key), c.Op, c.Value)
	}
}

func opsOf(ops []ledger.Op) []clientv3.Op {
	out := make([]clientv3.Op, len(ops))
	for i, o := range ops {
		var opts []clientv3.OpOption
		if o.Prefix {
			opts = append(opts, clientv3.WithPrefix())
		}
		if o.Lease != 0 {
			opts = append(opts, clientv3.WithLease(clientv3.LeaseID(o.Lease)))
		}
		switch o.Kind {
		case ledger.OpPut:
			out[i] = clientv3.OpPut(o.Key, o.Value, opts...)
		case ledger.OpDelete:
			out[i] = clientv3.OpDelete(o.Key, opts...)
		default:
			out[i] = clientv3.OpGet(o.Key, opts...)
		}
	}
	return out
}

func kvsOf(kvs []*mvccpb.KeyValue) []ledger.KV {
	out := make([]ledger.KV, len(kvs))
	for i, kv := range kvs {
		out[i] = ledger.KV{Key: string(kv.Key), Value: kv.Value, Lease: kv.Lease, ModRev: kv.ModRevision}
	}
	return out
}

// signal wakes whoever waits on what the ledger's last input changed:
// Changed's reader when changed, Sync's waiters when the view's revision
// passed rev0, a Join in progress once every rank was seen. Called with mu
// held.
func (g *Group) signal(changed bool, rev0 int64) {
	if changed {
		g.notify()
	}
	if g.l.Rev() > rev0 {
		close(g.moved)
		g.moved = make(chan struct{})
	}
	if !g.joinSeen && g.l.JoinReady() {
		g.joinSeen = true
		close(g.joinCh)
	}
}
