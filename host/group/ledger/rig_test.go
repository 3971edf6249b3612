package ledger

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/scripttest"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/sdk"
)

// rig is one engine's group in a script: an in-memory etcd and each
// rank's ledger, whose transactions the rig runs and whose watch it
// delivers, as package group does over a real etcd.
type rig struct {
	t     *testing.T
	s     *store
	keys  Keys
	ranks []*srank
}

// srank is one rank of a rig.
type srank struct {
	n      int
	member string
	lease  int64
	l      *Ledger
	// seen counts the store's events this rank's watch delivered.
	seen int
	logs []string
	// fail makes the rank's next transaction fail: refused (it never
	// ran) or unanswered (it ran; the answer was lost).
	fail string
	// refused: the rank's join was refused.
	refused bool
	// plan is the write a report or flush with step=true left open: its
	// transactions run one per txn command (nil while none is open).
	plan *Flush
	// outs and err are what the last resolve returned.
	outs []Outcome
	err  error
}

// logger collects a rank's log records above debug, for the output.
type logger struct{ r *srank }

func (lg logger) Debug(string, ...any) {}
func (lg logger) Warn(msg string, args ...any) {
	lg.r.logs = append(lg.r.logs, "warn "+msg+renderArgs(args))
}
func (lg logger) Error(msg string, args ...any) {
	lg.r.logs = append(lg.r.logs, "error "+msg+renderArgs(args))
}

func renderArgs(args []any) string {
	var b strings.Builder
	for i := 0; i+1 < len(args); i += 2 {
		fmt.Fprintf(&b, " %v=%v", args[i], args[i+1])
	}
	return b.String()
}

const engine = "e"

// newRig reads "new size=N [ops=K]": N ranks, members m0..m<N-1>, each
// with its lease, none joined; etcd takes K operations per transaction.
func newRig(t *testing.T, c scripttest.Case) *rig {
	a := parseArgs(t, c)
	size := a.int("size", 2)
	g := &rig{t: t, s: newStore(a.int("ops", 128)), keys: NewKeys(engine)}
	for n := range size {
		r := &srank{n: n, member: "m" + strconv.Itoa(n)}
		g.ranks = append(g.ranks, r)
		g.open(r, size)
	}
	return g
}

// open starts rank r's ledger with a new lease and loads the prefix.
func (g *rig) open(r *srank, size int) {
	r.lease = g.s.grant()
	r.l = New(Config{Engine: engine, Rank: r.n, Size: size, Member: r.member}, logger{r})
	r.l.SetLease(r.lease)
	r.l.Reload(g.s.get(g.keys.Base, true), g.s.rev)
	r.seen, r.refused, r.plan = len(g.s.log), false, nil
}

// testMode is the mode every rank joins with, but where a script says
// otherwise.
func testMode() Mode {
	return Mode{
		Transport: "fake", ContractMajor: sdk.ContractMajor,
		Capabilities:     Capabilities{Remote: true, Notifications: true},
		FenceScope:       sdk.FenceInitiatedAndIncoming,
		Pools:            []PoolMode{{Name: "kv", BlockSize: 4096, Blocks: 64}},
		EscalationPolicy: "fence", EscalationCap: 120 * time.Second,
	}
}

// run runs one command and renders what it did.
func (g *rig) run(c scripttest.Case) string {
	a := parseArgs(g.t, c)
	var out []string
	switch a.cmd {
	case "new":
		for _, r := range g.ranks {
			out = append(out, fmt.Sprintf("r%d: member %s lease %d", r.n, r.member, r.lease))
		}
	case "join":
		out = g.join(a)
	case "report":
		// step=true leaves the write open for txn commands.
		r := g.rank(a)
		var ts []Terminal
		for _, kv := range a.rest("r", "step") {
			st, reason, _ := strings.Cut(kv[1], ":")
			s, _ := ParseState(st) // 0, not a terminal state, if unknown
			ts = append(ts, Terminal{Request: core.RequestID(kv[0]), State: s, Reason: reason})
		}
		if err := r.l.Report(ts); err != nil {
			out = append(out, renderErr(err))
			break
		}
		if a.bool("step") {
			out = append(out, g.plan(r)...)
		} else {
			out = append(out, g.flush(r)...)
		}
		out = append(out, g.book(r, false)...)
	case "flush":
		r := g.rank(a)
		if a.bool("step") {
			out = append(g.plan(r), g.book(r, false)...)
			break
		}
		out = append(g.flush(r), g.book(r, false)...)
	case "txn":
		// The next transaction of the write left open, fail= as the fail
		// command's next=; watch=true delivers the rank's watch between
		// the transaction and its answer.
		r := g.rank(a)
		fail, _ := a.get("fail")
		out = append(g.txn(r, fail, a.bool("watch")), g.book(r, false)...)
	case "deliver":
		// n=K: at most K watch responses (every one pending by default).
		for _, r := range g.targets(a) {
			out = append(out, g.deliverUpTo(r, a.int("n", 0))...)
		}
	case "resolve":
		r := g.rank(a)
		outs, err := r.l.Resolve(a.ids())
		r.outs, r.err = outs, err
		if err != nil {
			out = append(out, renderErr(err))
			break
		}
		for _, o := range outs {
			out = append(out, renderOutcome(o))
		}
		out = append(out, g.book(r, false)...)
	case "settle":
		// Twice, each rank writes what it owes, catches up and resolves
		// nothing new: what each may delete goes out, and each folds
		// what the others deleted.
		for range 2 {
			for _, r := range g.ranks {
				out = append(out, g.flush(r)...)
				g.deliver(r)
				_, err := r.l.Resolve(nil)
				require.NoError(g.t, err)
			}
		}
		for _, r := range g.ranks {
			out = append(out, g.book(r, false)...)
		}
	case "book":
		out = g.book(g.rank(a), true)
	case "expire":
		r := g.rank(a)
		g.failNext(r, a)
		out = append(g.expire(r, a.ids(), a.dur("waited", time.Second)), g.book(r, false)...)
	case "lose":
		r := g.rank(a)
		g.s.revoke(r.lease)
		out = append(out, fmt.Sprintf("r%d: lease %d revoked", r.n, r.lease))
	case "restart":
		// own=true: only the restarted rank's watch catches up.
		r := g.rank(a)
		g.s.revoke(r.lease)
		r.member += "b"
		g.open(r, len(g.ranks))
		out = append(out, fmt.Sprintf("r%d: member %s lease %d", r.n, r.member, r.lease))
		out = append(out, g.join(a)...)
	case "intrude":
		// A second process claims rank r while r's member holds it.
		r := g.rank(a)
		x := &srank{n: r.n, member: r.member + "x"}
		g.open(x, len(g.ranks))
		t, err := x.l.Join(testMode())
		require.NoError(g.t, err)
		res := g.exec(x, t)
		out = append(out, res.lines...)
		if err := x.l.MemberWritten(res.res, 30*time.Second); err != nil {
			out = append(out, fmt.Sprintf("r%d (%s): %s", x.n, x.member, renderErr(err)))
		}
		g.s.revoke(x.lease)
	case "end-lease":
		key := g.abs(a.str("key"))
		kv := g.s.kvs[key]
		require.NotNil(g.t, kv, "line %d: no key %s", c.Line, key)
		g.s.revoke(kv.lease)
		out = append(out, fmt.Sprintf("lease %d revoked", kv.lease))
	case "forge":
		out = g.forge(a)
	case "fail":
		r := g.rank(a)
		r.fail = a.str("next")
		out = append(out, fmt.Sprintf("r%d: the next transaction is %s", r.n, r.fail))
	case "poison":
		r := g.rank(a)
		g.failNext(r, a)
		t := r.l.Poison(a.str("pool"), a.str("reason"), time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
		if len(t.Then) > 0 {
			out = append(out, g.exec(r, t).lines...)
		} else {
			r.fail = "" // a group of size 1 writes nothing
		}
	case "clear":
		_, err := g.s.txn(Txn{Then: []Op{del(g.keys.Poison(a.str("pool")), false)}})
		require.NoError(g.t, err)
		out = append(out, "operator: poison of "+a.str("pool")+" deleted")
	case "poisoned":
		for _, r := range g.targets(a) {
			var pools []string
			for _, p := range r.l.Poisoned() {
				pools = append(pools, fmt.Sprintf("%s (rank %d: %s)", p.Pool, p.Rank, p.Reason))
			}
			out = append(out, fmt.Sprintf("r%d: poisoned [%s]", r.n, strings.Join(pools, ", ")))
		}
	case "lost":
		r := g.rank(a)
		out = append(out, fmt.Sprintf("r%d: lost %v self-lost %v live %v", r.n, r.l.LostRanks(), r.l.SelfLost(), r.l.Live()))
	case "reload":
		r := g.rank(a)
		r.l.Reload(g.s.get(g.keys.Base, true), g.s.rev)
		r.seen = len(g.s.log)
		out = append(out, fmt.Sprintf("r%d: reloaded at rev %d", r.n, g.s.rev))
	case "store":
		out = g.dump()
	default:
		g.t.Fatalf("line %d: unknown command %q", c.Line, a.cmd)
	}
	for _, r := range g.ranks {
		for _, l := range r.logs {
			out = append(out, fmt.Sprintf("r%d log: %s", r.n, l))
		}
		r.logs = nil
	}
	if len(out) == 0 {
		out = append(out, "ok")
	}
	return strings.Join(out, "\n")
}

// failNext makes rank r's next transaction fail as fail= says, as the
// fail command does (a command without fail= leaves the fail command's).
func (g *rig) failNext(r *srank, a args) {
	if f, ok := a.get("fail"); ok {
		r.fail = f
	}
}

func (g *rig) rank(a args) *srank {
	n := a.int("r", -1)
	require.True(g.t, n >= 0 && n < len(g.ranks), "line %d: want r=<rank>", a.line)
	return g.ranks[n]
}

// targets is the rank r= names, or every rank.
func (g *rig) targets(a args) []*srank {
	if _, ok := a.get("r"); ok {
		return []*srank{g.rank(a)}
	}
	return g.ranks
}

// abs is the key a script names relative to the engine's prefix (last/<r>
// relative to the lasts' prefix).
func (g *rig) abs(key string) string {
	if rest, ok := strings.CutPrefix(key, "last/"); ok {
		return g.keys.lasts + rest
	}
	if strings.HasPrefix(key, "/") {
		return key
	}
	return g.keys.Base + key
}
