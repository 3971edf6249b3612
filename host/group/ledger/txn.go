package ledger

// Txn is one etcd transaction as plain data: if every comparison in If
// holds, the operations in Then run, else those in Else. The ledger plans
// transactions and never runs one; its caller runs each as it is given and
// hands the ledger the Result.
type Txn struct {
	// What the transaction does, for the caller's error when etcd fails.
	What string
	If   []Cmp
	Then []Op
	Else []Op
}

// CmpTarget is what a comparison reads of its key.
type CmpTarget uint8

// The comparisons the ledger makes. A key that does not exist compares as
// zero on each.
const (
	// CmpLease: the lease the key is attached to.
	CmpLease CmpTarget = iota + 1
	// CmpCreated: the key's create revision (0: no such key).
	CmpCreated
	// CmpModified: the key's last modification's revision.
	CmpModified
)

// Cmp is one comparison of a Txn: Target of Key, then Op ("=" or "<"),
// then Value.
type Cmp struct {
	Key    string
	Target CmpTarget
	Op     string
	Value  int64
}

// OpKind is what an operation does.
type OpKind uint8

// The operations the ledger asks for.
const (
	OpPut OpKind = iota + 1
	OpDelete
	OpGet
)

// Op is one operation of a Txn.
type Op struct {
	Kind  OpKind
	Key   string
	Value string
	// Prefix makes a delete or a get apply to every key under Key.
	Prefix bool
	// Lease attaches a put to that lease (0: none).
	Lease int64
}

// KV is one key as etcd holds it.
type KV struct {
	Key   string
	Value []byte
	Lease int64
	// ModRev is the revision of the key's last modification.
	ModRev int64
}

// Result is what etcd answered to a Txn.
type Result struct {
	// Succeeded: every comparison held and Then ran.
	Succeeded bool
	// Rev is etcd's revision after the transaction.
	Rev int64
	// Ranges has one entry per operation of the branch that ran: the keys
	// a get read, nil for a put or a delete.
	Ranges [][]KV
}

// rangeOf is what the i-th operation of the branch read.
func (r Result) rangeOf(i int) []KV {
	if i < len(r.Ranges) {
		return r.Ranges[i]
	}
	return nil
}

// Event is one change the watch of the engine's prefix showed.
type Event struct {
	// Delete: the key was deleted; else it was put with Value.
	Delete bool
	Key    string
	Value  []byte
	// Rev is the revision of the change.
	Rev int64
	// Lease is the lease a put key is attached to (0: none).
	Lease int64
}

func put(key, value string, lease int64) Op {
	return Op{Kind: OpPut, Key: key, Value: value, Lease: lease}
}
func del(key string, prefix bool) Op { return Op{Kind: OpDelete, Key: key, Prefix: prefix} }
func get(key string) Op              { return Op{Kind: OpGet, Key: key} }

func leaseIs(key string, lease int64) Cmp {
	return Cmp{Key: key, Target: CmpLease, Op: "=", Value: lease}
}
func absent(key string) Cmp { return Cmp{Key: key, Target: CmpCreated, Op: "=", Value: 0} }
func unchangedSince(key string, rev int64) Cmp {
	return Cmp{Key: key, Target: CmpModified, Op: "<", Value: rev + 1}
}
