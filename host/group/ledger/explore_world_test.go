package ledger

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/custody-dev/custody/internal/scripttest"

	"github.com/custody-dev/custody/core"
)

// world is a rank group over the in-memory store (the rig) whose every
// input is one line of the script language, so that a path of the
// explorer is a script: the explorer's model and the runtime of the
// scripts whose first line is "new ... explore=true". It keeps the ground
// truth the invariants are checked against, read from the store's log,
// never from a ledger: what each member wrote to etcd, which members lost
// their lease, which requests an expiry was written for; and, per rank
// process, what the host was handed (the outcomes Resolve returned) and
// which pools it must hold poisoned.
type world struct {
	cfg   exploreConfig
	g     *rig
	procs []*proc // each rank's current process
	// logged counts the store's log entries folded into the ground truth.
	logged int
	// members is the member each rank's key holds ("" while none does).
	members []string
	// landed is, per rank, request and member, the state that member's
	// states record put in etcd.
	landed []map[core.RequestID]map[string]State
	// lost are the members whose key went (their lease ended).
	lost map[string]bool
	// expired are the requests an expiry was written for.
	expired map[core.RequestID]bool
	// records are the requests each states record in etcd holds.
	records map[string][]core.RequestID
	// decided is the first union resolved of each request, by a rank
	// that did not know itself lost (agreement, rule 10).
	decided map[core.RequestID]decision
	// losses counts the lose inputs so far.
	losses int
	// violation is the first invariant broken, "" while none is.
	violation string
	// drained holds the states a quiescence drain passed through without
	// a violation (the explorer's, shared by its worlds; nil: none kept).
	drained map[uint64]bool
}

// proc is one process of a rank: what its host reported and was handed.
type proc struct {
	member string
	// fresh: the rank's first process, which reports the configured
	// requests; a process that restarted never learns of them (request
	// ids are unique, across a restart too).
	fresh    bool
	reported map[core.RequestID]State
	snaps    map[core.RequestID][]string // the membership when it reported each
	// awaited: reported, and no resolved outcome returned yet; returned:
	// Resolve returned the outcome.
	awaited  map[core.RequestID]bool
	returned map[core.RequestID]bool
	// outcomes is the first resolved outcome its ledger held of each.
	outcomes map[core.RequestID]Outcome
	// poisoned are the pools it must hold poisoned, each with the number
	// of the operator's deletions of its record before it learned of it:
	// one more clears it.
	poisoned map[string]int
}

// decision is a request's union as one rank resolved it.
type decision struct {
	State  State
	Rank   int
	Member string
}

func newProc(member string, fresh bool) *proc {
	return &proc{member: member, fresh: fresh, reported: map[core.RequestID]State{}, snaps: map[core.RequestID][]string{},
		awaited: map[core.RequestID]bool{}, returned: map[core.RequestID]bool{}, outcomes: map[core.RequestID]Outcome{}, poisoned: map[string]int{}}
}

func newWorld(t *testing.T, cfg exploreConfig) *world {
	g := newRig(t, scripttest.Case{Cmd: fmt.Sprintf("new size=%d", cfg.size)})
	w := &world{cfg: cfg, g: g, members: make([]string, cfg.size), lost: map[string]bool{},
		expired: map[core.RequestID]bool{}, records: map[string][]core.RequestID{}, decided: map[core.RequestID]decision{}}
	for _, r := range g.ranks {
		w.procs = append(w.procs, newProc(r.member, true))
		w.landed = append(w.landed, map[core.RequestID]map[string]State{})
	}
	return w
}

func (w *world) solo() bool { return w.cfg.size == 1 }

func (w *world) fail(format string, args ...any) {
	if w.violation == "" {
		w.violation = fmt.Sprintf(format, args...)
	}
}

// step applies one input line and returns its rendered output.
func (w *world) step(line string) string {
	out := w.exec(line)
	if w.violation != "" {
		out = append(out, "violation: "+w.violation)
	}
	return strings.Join(out, "\n")
}

// exec runs one command and checks every invariant after it.
func (w *world) exec(line string) []string {
	a := parseArgs(w.g.t, scripttest.Case{Cmd: line})
	seen := make([]int, len(w.g.ranks))
	for i, r := range w.g.ranks {
		seen[i] = r.seen
	}
	var out []string
	if a.cmd == "quiesce" {
		return w.quiesce(a.bool("impatient"))
	}
	out = strings.Split(w.g.run(scripttest.Case{Cmd: line}), "\n")
	w.fold()
	for n, r := range w.g.ranks {
		p := w.procs[n]
		switch {
		case r.member != p.member:
			// Restarted: a new process, which read the prefix whole.
			p = newProc(r.member, false)
			w.procs[n] = p
			w.learnPoison(p, 0, true)
		case a.cmd == "reload" && a.int("r", -1) == n:
			w.learnPoison(p, seen[n], true)
		default:
			w.learnPoison(p, seen[n], false)
		}
	}
	if a.cmd == "lose" {
		w.losses++
	}
	if a.cmd == "poison" {
		w.procs[a.int("r", -1)].poisoned[a.str("pool")] = w.clears(a.str("pool"), len(w.g.s.log))
	}
	out = append(out, w.agree()...)
	if a.cmd == "resolve" {
		w.returned(a.int("r", -1))
	}
	w.check()
	return out
}

// agree is the host's join: a rank whose join waits agrees once its view
// holds every rank (rig.join does it for the ranks whose watch it
// delivers).
func (w *world) agree() []string {
	var out []string
	for _, r := range w.g.ranks {
		if r.l.Mode().Transport == "" || r.l.Joined() || r.refused || !r.l.JoinReady() {
			continue
		}
		if err := r.l.Agree(); err != nil {
			r.refused = true
			out = append(out, fmt.Sprintf("r%d: join refused: %s", r.n, renderErr(err)))
			continue
		}
		out = append(out, fmt.Sprintf("r%d: joined", r.n))
	}
	return out
}

// fold reads the store's new log entries into the ground truth.
func (w *world) fold() {
	k := w.g.keys
	for _, ev := range w.g.s.log[w.logged:] {
		switch {
		case strings.HasPrefix(ev.Key, k.Members()):
			rank, err := ParseRank(strings.TrimPrefix(ev.Key, k.Members()), w.cfg.size)
			if err != nil {
				continue
			}
			if ev.Delete {
				w.lost[w.members[rank]] = true
				w.members[rank] = ""
				continue
			}
			rec, err := decodeMember(ev.Value, rank)
			if err == nil {
				w.members[rank] = rec.Member
			}
		case strings.HasPrefix(ev.Key, k.Records()):
			rank, member, _, err := ParseRecordKey(strings.TrimPrefix(ev.Key, k.Records()), w.cfg.size)
			if err != nil {
				continue
			}
			if ev.Delete {
				w.retired(ev.Key, rank, member)
				delete(w.records, ev.Key)
				continue
			}
			entries, _ := DecodeStates(ev.Value, rank, member)
			w.records[ev.Key] = nil
			for _, e := range entries {
				w.records[ev.Key] = append(w.records[ev.Key], e.ID)
				m := w.landed[rank][e.ID]
				if m == nil {
					m = map[string]State{}
					w.landed[rank][e.ID] = m
				}
				if _, ok := m[member]; !ok {
					m[member] = e.State
				}
			}
		case strings.HasPrefix(ev.Key, k.Requests()) && !ev.Delete:
			if id, _, err := k.parseRequestID(ev.Key); err == nil {
				w.expired[id] = true
			}
		}
	}
	w.logged = len(w.g.s.log)
}

// retired checks the deletion of a states record of rank's member by its
// writer (rule 10, retirement is unanimous): every rank's state of each
// request in it is in etcd, or the rank is lost, or an expiry of the
// request was written, as the writer's own view could show it when it
// resolved them. (An orphan's deletion, by another rank, waits on no one.)
func (w *world) retired(key string, rank int, member string) {
	p := w.procs[rank]
	if p.member != member {
		return
	}
	for _, id := range w.records[key] {
		snap := p.snaps[id]
		if snap == nil || w.expired[id] {
			continue
		}
		for j, m := range snap {
			if len(w.landed[j][id]) == 0 && m != "" && !w.lost[m] {
				w.fail("rule 10: r%d (%s) deleted its states record %s while rank %d (member %s) had written no state of %q, was not lost, and no expiry was written", rank, member, w.g.rel(key), j, m, id)
				return
			}
		}
	}
}

// learnPoison updates what p must hold poisoned from what its watch
// delivered since log entry from, or, after a read of the prefix whole
// (reload), from what etcd holds now: a pool it held stays, unless an
// operator deleted its record since it learned of it.
func (w *world) learnPoison(p *proc, from int, reload bool) {
	k, log := w.g.keys, w.g.s.log
	if !reload {
		for i := from; i < w.g.ranks[w.rankOf(p)].seen; i++ {
			ev := log[i]
			if !strings.HasPrefix(ev.Key, k.Poisons()) {
				continue
			}
			if ev.Delete {
				delete(p.poisoned, k.PoolOf(ev.Key))
			} else {
				p.poisoned[k.PoolOf(ev.Key)] = w.clears(k.PoolOf(ev.Key), i)
			}
		}
		return
	}
	for pool, cleared := range p.poisoned {
		if w.g.s.kvs[k.Poison(pool)] == nil && w.clears(pool, len(log)) > cleared {
			delete(p.poisoned, pool)
		}
	}
	for key := range w.g.s.kvs {
		if strings.HasPrefix(key, k.Poisons()) {
			p.poisoned[k.PoolOf(key)] = w.clears(k.PoolOf(key), len(log))
		}
	}
}

// clears counts the deletions of pool's poison record among the store's
// first n log entries.
func (w *world) clears(pool string, n int) int {
	key, c := w.g.keys.Poison(pool), 0
	for _, ev := range w.g.s.log[:n] {
		if ev.Delete && ev.Key == key {
			c++
		}
	}
	return c
}

func (w *world) rankOf(p *proc) int { return slices.Index(w.procs, p) }

// returned takes what rank n's resolve returned: each resolved outcome is
// handed to the host, which stops waiting for it.
func (w *world) returned(n int) {
	r, p := w.g.ranks[n], w.procs[n]
	if r.err != nil {
		w.fail("rule 10: r%d (%s): resolve of the requests its host awaits failed: %v", n, p.member, r.err)
		return
	}
	for _, o := range r.outs {
		if !o.Resolved {
			continue
		}
		if p.returned[o.Request] {
			w.fail("rule 10: r%d (%s): request %q returned to the host twice", n, p.member, o.Request)
		}
		w.resolved(n, p, o.Request, o)
		p.returned[o.Request] = true
		delete(p.awaited, o.Request)
	}
}

// quiesce drains the group to rest, as hosts that keep running would: a
// lost rank restarts; every rank runs its open write, reports the
// configured requests it has not (Succeeded: a fresh process only),
// writes what it owes, catches its watch up and resolves, until nothing
// changes; then every rank expires what it still waits for, and on again.
// Impatient hosts expire what they wait for first (their hold cap has
// passed). At rest, nothing may be left (checkQuiet). Each step is
// checked as any input is.
func (w *world) quiesce(impatient bool) []string {
	var out []string
	run := func(line string) bool {
		out = append(out, "> "+line)
		out = append(out, w.exec(line)...)
		return w.violation == ""
	}
	if impatient && !w.expireAll(run) {
		return out
	}
	var path []uint64
	for round := 0; ; round++ {
		if round == maxQuiesceRounds {
			w.fail("quiescence: the group does not come to rest in %d rounds", maxQuiesceRounds)
			return out
		}
		h := w.hash()
		if w.drained[h] {
			out = append(out, "(at rest as before)")
			break
		}
		path = append(path, h)
		for n := range w.g.ranks {
			if !w.settle(n, run) {
				return out
			}
		}
		if w.hash() != h {
			continue
		}
		if !w.expireAll(run) {
			return out
		}
		if w.hash() == h {
			w.checkQuiet()
			break
		}
	}
	if w.violation == "" && w.drained != nil {
		for _, h := range path {
			w.drained[h] = true
		}
	}
	return out
}

const maxQuiesceRounds = 12

// expireAll has every rank expire what it still waits for.
func (w *world) expireAll(run func(string) bool) bool {
	for n, r := range w.g.ranks {
		if w.solo() || !r.l.Joined() || r.l.SelfLost() || r.plan != nil {
			continue
		}
		for _, id := range sortedKeys(r.l.book.reqs) {
			if !r.l.book.reqs[id].phase.resolved() && !run(fmt.Sprintf("expire r=%d ids=%s", n, id)) {
				return false
			}
		}
	}
	return true
}

// settle is one round of rank n's host at quiescence.
func (w *world) settle(n int, run func(string) bool) bool {
	r, p := w.g.ranks[n], w.procs[n]
	if w.lost[p.member] || r.l.SelfLost() {
		return run(fmt.Sprintf("restart r=%d own=true", n))
	}
	if !r.l.Joined() {
		if w.g.pendingResponses(r) > 0 {
			return run(fmt.Sprintf("deliver r=%d", n))
		}
		return true
	}
	write := func() bool {
		for r.plan != nil {
			if !run(fmt.Sprintf("txn r=%d", n)) {
				return false
			}
		}
		return true
	}
	if !write() {
		return false
	}
	if p.fresh {
		var ts []string
		for _, id := range w.cfg.requests {
			if _, ok := p.reported[id]; !ok {
				ts = append(ts, string(id)+"=succeeded")
			}
		}
		if len(ts) > 0 && (!run(fmt.Sprintf("report r=%d %s step=true", n, strings.Join(ts, " "))) || !write()) {
			return false
		}
	}
	if !w.solo() && r.l.Stats().Unwritten > 0 && (!run(fmt.Sprintf("flush r=%d step=true", n)) || !write()) {
		return false
	}
	if w.g.pendingResponses(r) > 0 && !run(fmt.Sprintf("deliver r=%d", n)) {
		return false
	}
	if !run(w.resolveLine(n)) {
		return false
	}
	if w.solo() && len(r.l.book.reqs) > 0 && len(p.awaited) == 0 {
		// A host reports every round, with no new states too: a group of
		// size 1 forgets there what Resolve returned.
		return run(fmt.Sprintf("report r=%d step=true", n))
	}
	return true
}

// resolveLine is rank n's resolve of the requests its host awaits.
func (w *world) resolveLine(n int) string {
	ids := sortedKeys(w.procs[n].awaited)
	if len(ids) == 0 {
		return fmt.Sprintf("resolve r=%d", n)
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = string(id)
	}
	return fmt.Sprintf("resolve r=%d ids=%s", n, strings.Join(s, ","))
}

// render is the world's first output: the ranks as the rig's new prints
// them.
func (w *world) render() string {
	var out []string
	for _, r := range w.g.ranks {
		out = append(out, fmt.Sprintf("r%d: member %s lease %d", r.n, r.member, r.lease))
	}
	return strings.Join(out, "\n")
}
