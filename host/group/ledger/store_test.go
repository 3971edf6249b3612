package ledger

import (
	"fmt"
	"slices"
	"strings"
)

// store is an etcd as far as the ledger's transactions need one: keys with
// their create and mod revisions and lease, leases that delete their keys
// when revoked, transactions applied at one revision, and the log of every
// event, which the rig delivers to each rank's ledger as its watch would.
type store struct {
	rev    int64
	kvs    map[string]*storeKV
	leases map[int64]bool
	lease  int64 // the last lease granted
	log    []Event
	maxOps int
}

type storeKV struct {
	value       string
	create, mod int64
	lease       int64
}

func newStore(maxOps int) *store {
	return &store{rev: 1, kvs: map[string]*storeKV{}, leases: map[int64]bool{}, maxOps: maxOps}
}

func (s *store) grant() int64 {
	s.lease++
	s.leases[s.lease] = true
	return s.lease
}

// revoke ends a lease, deleting its keys at one revision.
func (s *store) revoke(lease int64) {
	delete(s.leases, lease)
	var gone []string
	for k, kv := range s.kvs {
		if kv.lease == lease {
			gone = append(gone, k)
		}
	}
	if len(gone) == 0 {
		return
	}
	slices.Sort(gone)
	s.rev++
	for _, k := range gone {
		s.remove(k)
	}
}

func (s *store) remove(key string) {
	delete(s.kvs, key)
	s.log = append(s.log, Event{Delete: true, Key: key, Rev: s.rev})
}

// write puts key outside any transaction (a writer that is not a rank).
func (s *store) write(key, value string) {
	s.rev++
	s.set(key, value, 0)
}

func (s *store) set(key, value string, lease int64) {
	kv := s.kvs[key]
	if kv == nil {
		kv = &storeKV{create: s.rev}
		s.kvs[key] = kv
	}
	kv.value, kv.mod, kv.lease = value, s.rev, lease
	s.log = append(s.log, Event{Key: key, Value: []byte(value), Rev: s.rev, Lease: lease})
}

// txn applies t as etcd would: every write of the branch taken at one new
// revision (none if it writes nothing).
func (s *store) txn(t Txn) (Result, error) {
	if len(t.Then) > s.maxOps || len(t.Else) > s.maxOps || len(t.If) > s.maxOps {
		return Result{}, fmt.Errorf("etcd: too many operations in txn request")
	}
	ok := true
	for _, c := range t.If {
		ok = ok && s.holds(c)
	}
	ops := t.Else
	if ok {
		ops = t.Then
	}
	for _, o := range ops {
		if o.Kind == OpPut && o.Lease != 0 && !s.leases[o.Lease] {
			return Result{}, fmt.Errorf("etcd: requested lease not found")
		}
	}
	res := Result{Succeeded: ok, Ranges: make([][]KV, len(ops))}
	wrote := false
	for i, o := range ops {
		switch o.Kind {
		case OpGet:
			res.Ranges[i] = s.get(o.Key, o.Prefix)
		case OpPut:
			if !wrote {
				s.rev, wrote = s.rev+1, true
			}
			s.set(o.Key, o.Value, o.Lease)
		case OpDelete:
			for _, kv := range s.get(o.Key, o.Prefix) {
				if !wrote {
					s.rev, wrote = s.rev+1, true
				}
				s.remove(kv.Key)
			}
		}
	}
	res.Rev = s.rev
	return res, nil
}

func (s *store) holds(c Cmp) bool {
	var v int64
	if kv := s.kvs[c.Key]; kv != nil {
		switch c.Target {
		case CmpLease:
			v = kv.lease
		case CmpCreated:
			v = kv.create
		case CmpModified:
			v = kv.mod
		}
	}
	switch c.Op {
	case "=":
		return v == c.Value
	case "<":
		return v < c.Value
	}
	panic("store: comparison " + c.Op)
}

// get reads key, or every key under it, in key order.
func (s *store) get(key string, prefix bool) []KV {
	var out []KV
	for k, kv := range s.kvs {
		if k == key || (prefix && strings.HasPrefix(k, key)) {
			out = append(out, KV{Key: k, Value: []byte(kv.value), Lease: kv.lease, ModRev: kv.mod})
		}
	}
	slices.SortFunc(out, func(a, b KV) int { return strings.Compare(a.Key, b.Key) })
	return out
}
