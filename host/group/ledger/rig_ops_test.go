package ledger

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/core"
)

// ran is what running one transaction printed and answered.
type ran struct {
	lines []string
	res   Result
	err   error
}

// exec runs one transaction of rank r against the store, as package
// group's run does, failing it where the script said so.
func (g *rig) exec(r *srank, t Txn) ran {
	line := fmt.Sprintf("r%d txn: %s", r.n, g.renderTxn(t))
	fail := r.fail
	r.fail = ""
	if fail == "refused" {
		err := errors.New("etcd: context deadline exceeded")
		return ran{lines: []string{line + " -> " + err.Error()}, err: err}
	}
	res, err := g.s.txn(t)
	require.NoError(g.t, err, "the store refused %s", line)
	if fail == "unanswered" {
		err := errors.New("etcd: context deadline exceeded (it ran)")
		return ran{lines: []string{line + " -> " + err.Error()}, err: err}
	}
	return ran{lines: []string{line + " -> " + g.renderResult(res)}, res: res}
}

// flush runs one Flush of rank r, as package group's Report does.
func (g *rig) flush(r *srank) []string {
	var out []string
	f := r.l.Flush(g.s.maxOps)
	for {
		t, ok := f.Next()
		if !ok {
			if err := f.Err(); err != nil {
				out = append(out, renderErr(err))
			}
			return out
		}
		x := g.exec(r, t)
		out = append(out, x.lines...)
		if x.err != nil {
			return append(out, "error: "+t.What+": "+x.err.Error())
		}
		if _, err := f.Done(x.res); err != nil {
			return append(out, renderErr(err))
		}
	}
}

// deliver hands rank r every event its watch has not delivered yet, one
// response per revision, then a progress notice at the store's revision.
func (g *rig) deliver(r *srank) []string { return g.deliverUpTo(r, 0) }

// deliverUpTo is deliver of at most n responses (n == 0: all of them);
// the progress notice comes once the watch has caught up.
func (g *rig) deliverUpTo(r *srank, n int) []string {
	log, base := g.s.log, g.keys.Base
	skip := func(i int) int {
		for i < len(log) && !strings.HasPrefix(log[i].Key, base) {
			i++
		}
		return i
	}
	var seen []string
	changed := false
	i := skip(r.seen)
	for k := 0; i < len(log) && (n == 0 || k < n); k++ {
		var evs []Event
		j := i
		for ; j < len(log) && log[j].Rev == log[i].Rev; j++ {
			if strings.HasPrefix(log[j].Key, base) {
				evs = append(evs, log[j])
			}
		}
		changed = r.l.Apply(evs) || changed
		for _, ev := range evs {
			what := "put "
			if ev.Delete {
				what = "del "
			}
			seen = append(seen, what+g.rel(ev.Key))
		}
		i = skip(j)
	}
	r.seen = i
	if i == len(log) {
		changed = r.l.Progress(g.s.rev) || changed
	}
	if len(seen) == 0 {
		return []string{fmt.Sprintf("r%d watch: nothing new (rev %d)", r.n, r.l.Rev())}
	}
	note := ""
	if changed {
		note = " (changed)"
	}
	return []string{fmt.Sprintf("r%d watch: %s%s", r.n, strings.Join(seen, ", "), note)}
}

// pendingResponses counts the watch responses rank r has yet to deliver.
func (g *rig) pendingResponses(r *srank) int {
	n, last := 0, int64(-1)
	for _, ev := range g.s.log[r.seen:] {
		if strings.HasPrefix(ev.Key, g.keys.Base) && ev.Rev != last {
			n, last = n+1, ev.Rev
		}
	}
	return n
}

// plan opens rank r's next write, as package group's Report does, for txn
// commands to run one transaction at a time (a group of size 1 writes
// nothing).
func (g *rig) plan(r *srank) []string {
	require.Nil(g.t, r.plan, "r%d: a write is open already", r.n)
	if r.l.solo() {
		return nil
	}
	f := r.l.Flush(g.s.maxOps)
	if _, ok := f.Next(); !ok {
		return []string{fmt.Sprintf("r%d write: nothing to write", r.n)}
	}
	r.plan = f
	return []string{fmt.Sprintf("r%d write: open", r.n)}
}

// txn runs the next transaction of rank r's open write, failing it as
// fail says (refused, unanswered); with watch, the rank's watch delivers
// what is pending between the transaction and its answer. The write ends
// at its first error or once it has nothing left.
func (g *rig) txn(r *srank, fail string, watch bool) []string {
	f := r.plan
	require.NotNil(g.t, f, "r%d: no write is open", r.n)
	t, ok := f.Next()
	require.True(g.t, ok, "r%d: the open write has nothing left", r.n)
	r.fail = fail
	x := g.exec(r, t)
	out := x.lines
	if x.err != nil {
		r.plan = nil
		return append(out, "error: "+t.What+": "+x.err.Error())
	}
	if watch {
		out = append(out, g.deliver(r)...)
	}
	if _, err := f.Done(x.res); err != nil {
		r.plan = nil
		return append(out, renderErr(err))
	}
	if _, ok := f.Next(); !ok {
		r.plan = nil
		if err := f.Err(); err != nil {
			out = append(out, renderErr(err))
		}
		out = append(out, fmt.Sprintf("r%d write: done", r.n))
	}
	return out
}

// join joins rank r= (or every rank not yet joining) with the test mode,
// changed as the script says (blocks=, block_size=, transport=,
// contract=), delivers every watch (with own=true, the joining rank's
// only), and agrees where a rank saw all.
func (g *rig) join(a args) []string {
	var out []string
	targets := g.targets(a)
	watched := g.ranks
	if a.bool("own") {
		watched = targets
	}
	for _, r := range targets {
		if r.l.Mode().Transport != "" {
			continue
		}
		m := testMode()
		m.Pools[0].Blocks = uint64(a.int("blocks", int(m.Pools[0].Blocks)))
		m.Pools[0].BlockSize = uint64(a.int("block_size", int(m.Pools[0].BlockSize)))
		m.ContractMajor = uint32(a.int("contract", int(m.ContractMajor)))
		if tr, ok := a.get("transport"); ok {
			m.Transport = tr
		}
		t, err := r.l.Join(m)
		if err != nil {
			out = append(out, fmt.Sprintf("r%d: %s", r.n, renderErr(err)))
			continue
		}
		if r.l.solo() {
			continue
		}
		x := g.exec(r, t)
		out = append(out, x.lines...)
		if err := r.l.MemberWritten(x.res, 30*time.Second); err != nil {
			r.refused = true
			out = append(out, fmt.Sprintf("r%d: %s", r.n, renderErr(err)))
		}
	}
	for _, r := range watched {
		g.deliver(r)
	}
	for _, r := range watched {
		switch {
		case r.l.Joined() || r.refused || r.l.Mode().Transport == "":
		case !r.l.JoinReady():
			out = append(out, fmt.Sprintf("r%d: waiting for ranks %v", r.n, r.l.Missing()))
		default:
			if err := r.l.Agree(); err != nil {
				r.refused = true
				out = append(out, fmt.Sprintf("r%d: join refused: %s", r.n, renderErr(err)))
				continue
			}
			out = append(out, fmt.Sprintf("r%d: joined", r.n))
		}
	}
	return out
}

// expire runs an Expire of ids by rank r after waiting waited, as package
// group's does: a lease granted for the first expiry it writes (revoked if
// none is, and no transaction failed), and up to three looks per request,
// the rank's watch catching up between them.
func (g *rig) expire(r *srank, ids []core.RequestID, waited time.Duration) []string {
	if err := r.l.CheckExpire(ids); err != nil {
		return []string{renderErr(err)}
	}
	var out []string
	var lease int64
	used := false
	defer func() {
		if lease != 0 && !used {
			g.s.revoke(lease)
			out = append(out, fmt.Sprintf("r%d: lease %d unused, revoked", r.n, lease))
		}
	}()
	for _, id := range ids {
		for attempt := 1; ; attempt++ {
			pending, rev, due := r.l.ExpiryDue(id)
			if !due {
				out = append(out, fmt.Sprintf("r%d: %s not pending", r.n, id))
				break
			}
			if lease == 0 {
				lease = g.s.grant()
				out = append(out, fmt.Sprintf("r%d: lease %d granted, ttl %ds", r.n, lease, ExpiryTTLFor(waited)))
			}
			x := g.exec(r, r.l.ExpiryTxn(id, pending, rev, waited, lease))
			out = append(out, x.lines...)
			if x.err != nil {
				used = true // it may have run: the lease is kept, as group's Expire does
				return append(out, "error: "+x.err.Error())
			}
			wrote, at, err := r.l.ExpiryWritten(id, pending, waited, x.res)
			used = used || wrote || err != nil
			if err != nil {
				return append(out, renderErr(err))
			}
			if wrote {
				break
			}
			if attempt == 3 {
				return append(out, renderErr(r.l.ExpiryGaveUp(id, attempt)))
			}
			require.LessOrEqual(g.t, at, g.s.rev)
			out = append(out, g.deliver(r)...)
		}
	}
	return out
}

// forge writes what a broken or foreign writer would, outside any
// transaction: key= relative to the engine's prefix, and states= (a
// states record of the rank and member the key names:
// id:state,id:state) or raw= (the rest of the line, as is).
func (g *rig) forge(a args) []string {
	key := g.abs(a.str("key"))
	value, ok := a.get("raw")
	if !ok {
		rank, member, _, err := ParseRecordKey(strings.TrimPrefix(key, g.keys.Records()), len(g.ranks))
		require.NoError(g.t, err, "line %d", a.line)
		var ts []Terminal
		for _, s := range strings.Split(a.str("states"), ",") {
			id, st, _ := strings.Cut(s, ":")
			state, _ := ParseState(st)
			ts = append(ts, Terminal{Request: core.RequestID(id), State: state})
		}
		value = EncodeStates(rank, member, ts)
	}
	g.s.write(key, value)
	return []string{fmt.Sprintf("forged %s = %s", g.rel(key), g.renderValue(key, []byte(value)))}
}
