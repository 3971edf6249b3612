package ledger

import (
	"flag"
	"fmt"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/core"
)

// The explorer enumerates every order of inputs to a rank group up to a
// depth, in breadth-first order, and checks the invariants of
// explore_invariants_test.go after every step, as core's does for core
// (core/explore_test.go). The group is the rig's: each rank's ledger over
// the in-memory etcd, whose transactions the rig runs and whose watch it
// delivers. Inputs are a rank reporting a request's terminal state (each
// state), a rank opening a write (flush), each transaction of an open
// write answered, refused, run with its answer lost, or answered after
// the rank's watch delivered what it brought; a rank's watch delivering
// its next response (or all of them), or breaking (a reload of the prefix
// whole); a rank resolving what its host awaits (all of it, or one request
// at a time); a rank expiring a request past its hold cap (answered,
// refused, answer lost); a rank's lease ending, and its host restarting as
// a new member; a rank poisoning a pool, an operator clearing it; and a
// drain to rest (quiesce; impatient=true: every host first expires what it
// waits for), after which nothing may be left. A state seen before
// (stateHasher) is not expanded again. The first violation found is
// printed as a testdata script, the shortest such sequence, since the
// search is breadth first: copied into testdata it fails until the rule
// is kept again (testdata/pending holds those of defects not fixed yet).
var (
	exploreLarge = flag.Bool("explore.large", false, "explore the larger bound instead of the CI bound")
	exploreDepth = flag.Int("explore.depth", 0, "override every configuration's depth")
)

// exploreConfig is one configuration of the explorer: the group, the
// inputs it offers, and its bounds.
type exploreConfig struct {
	name     string
	size     int
	requests []core.RequestID
	states   []State // the terminal states each rank may report
	// together offers a rank's report of every request it has yet to
	// report in one write (one states record of several).
	together bool
	// faults offers every transaction and expiry refused and with its
	// answer lost, and every write's answer after the rank's watch.
	faults bool
	expire bool
	// impatient offers a drain whose hosts expire what they wait for
	// first (quiesce impatient=true); partial a resolve of each awaited
	// request alone (package group's Outcome).
	impatient, partial bool
	losses             int  // lease losses per run
	restart            bool // a rank whose lease ended restarts as a new member
	reload             bool // a watch breaks: the rank reads the prefix whole
	pools              []string
	clear              bool // an operator clears a poisoned pool
	quiesce            bool
	depth              int
	// maxStates stops a configuration that outgrows its bound.
	maxStates int
}

var allStates = []State{Succeeded, Failed, TimedOut}

// exploreConfigs are the CI bound's configurations (all of them within
// some 20 seconds on two cores); the larger bound deepens each by one
// (which takes some ten times as long) and offers every state and the
// report of several requests in one write in each.
func exploreConfigs(large bool) []exploreConfig {
	ab := []core.RequestID{"a", "b"}
	cfgs := []exploreConfig{
		{name: "1 rank", size: 1, requests: ab, states: allStates, together: true, pools: []string{"kv"}, quiesce: true, depth: 8},
		{name: "2 ranks, union", size: 2, requests: ab, states: allStates, together: true, expire: true, quiesce: true, depth: 6},
		{name: "2 ranks, faults", size: 2, requests: ab, states: []State{Succeeded, TimedOut}, faults: true, expire: true, impatient: true, partial: true, quiesce: true, depth: 5},
		{name: "2 ranks, loss and poison", size: 2, requests: ab, states: []State{Succeeded, Failed}, expire: true, impatient: true, partial: true, losses: 1, restart: true, reload: true,
			pools: []string{"kv"}, clear: true, quiesce: true, depth: 5},
	}
	for i := range cfgs {
		cfgs[i].maxStates = 2_000_000
		if large {
			cfgs[i].depth++
			cfgs[i].states, cfgs[i].together = allStates, true
			cfgs[i].maxStates = 50_000_000
		}
		if *exploreDepth > 0 {
			cfgs[i].depth = *exploreDepth
		}
	}
	return cfgs
}

// TestExplore runs every configuration to its bound and fails with the
// shortest script that breaks an invariant.
func TestExplore(t *testing.T) {
	switch {
	case *exploreLarge:
	case testing.Short():
		t.Skip("the explorer runs in the full test run and with -explore.large")
	case raceEnabled:
		t.Skip("the explorer runs on one goroutine; it runs in the test run without the race detector")
	}
	// Its heap stays small (the seen states' hashes, the frontier's
	// paths) while it allocates a copy of the world per step: collect
	// less often.
	defer debug.SetGCPercent(debug.SetGCPercent(800))
	for _, cfg := range exploreConfigs(*exploreLarge) {
		t.Run(cfg.name, func(t *testing.T) {
			start := time.Now()
			res := explore(t, cfg)
			t.Logf("%s: depth %d, %d distinct states, %d steps, %d drains, %v", cfg.name, res.depth, res.states, res.steps, res.drains, time.Since(start).Round(time.Millisecond))
			if res.violation != nil {
				t.Fatalf("invariant broken after %d inputs:\n%s\n\nas a script (copy into host/group/ledger/testdata):\n\n%s", len(res.violation), res.why, script(t, cfg, res.violation))
			}
		})
	}
}

// exploreResult is what one configuration's search found.
type exploreResult struct {
	depth, states, steps, drains int
	violation                    []string // the inputs that break an invariant
	why                          string
}

type node struct {
	parent *node
	input  string
}

func (n *node) path() []string {
	var p []string
	for ; n != nil && n.parent != nil; n = n.parent {
		p = append(p, n.input)
	}
	for i, j := 0, len(p)-1; i < j; i, j = i+1, j-1 {
		p[i], p[j] = p[j], p[i]
	}
	return p
}

// explore searches cfg breadth first to its depth. Each frontier state is
// replayed once from the setup's (a copy of it), each input stepped from a
// copy of the frontier state. A quiesce input is checked, never expanded:
// the drain is the end of its path.
func explore(t *testing.T, cfg exploreConfig) exploreResult {
	var res exploreResult
	base := newWorld(t, cfg)
	base.drained = map[uint64]bool{}
	base.exec("join")
	replay := func(path []string) *world {
		w := base.clone()
		for _, in := range path {
			w.exec(in)
			res.steps++
		}
		if w.violation != "" {
			t.Fatalf("replaying %v: %s", path, w.violation)
		}
		return w
	}
	seen := map[uint64]bool{base.hash(): true}
	frontier := []*node{{}}
	for d := 1; d <= cfg.depth && len(frontier) > 0; d++ {
		res.depth = d
		var next []*node
		for _, n := range frontier {
			path := n.path()
			parent := replay(path)
			for _, in := range parent.inputs() {
				w := parent.clone()
				w.exec(in)
				res.steps++
				if w.violation != "" {
					res.violation, res.why = append(path, in), w.violation
					res.states = len(seen)
					return res
				}
				if strings.HasPrefix(in, "quiesce") {
					res.drains++
					continue
				}
				h := w.hash()
				if seen[h] {
					continue
				}
				seen[h] = true
				if len(seen) > cfg.maxStates {
					t.Fatalf("%s: more than %d states by depth %d: lower the depth", cfg.name, cfg.maxStates, d)
				}
				next = append(next, &node{parent: n, input: in})
			}
		}
		frontier = next
	}
	res.states = len(seen)
	return res
}

// inputs lists every input the world offers now, in a fixed order.
func (w *world) inputs() []string {
	var in []string
	add := func(format string, args ...any) { in = append(in, fmt.Sprintf(format, args...)) }
	for n, r := range w.g.ranks {
		p, l := w.procs[n], r.l
		pending := w.g.pendingResponses(r)
		switch {
		case l.SelfLost():
			// Its host fails every request and restarts.
			if w.cfg.restart {
				add("restart r=%d own=true", n)
			}
			continue
		case !l.Joined():
		case r.plan != nil:
			add("txn r=%d", n)
			if w.cfg.faults {
				add("txn r=%d watch=true", n)
				add("txn r=%d fail=refused", n)
				add("txn r=%d fail=unanswered", n)
			}
		default:
			if p.fresh {
				var left []core.RequestID
				for _, id := range w.cfg.requests {
					if _, ok := p.reported[id]; !ok {
						left = append(left, id)
					}
				}
				for _, id := range left {
					for _, st := range w.cfg.states {
						add("report r=%d %s=%v step=true", n, id, st)
					}
				}
				if len(left) > 1 && w.cfg.together {
					// All of them in one write: one record of several.
					for _, st := range w.cfg.states {
						var ts []string
						for _, id := range left {
							ts = append(ts, fmt.Sprintf("%s=%v", id, st))
						}
						add("report r=%d %s step=true", n, strings.Join(ts, " "))
					}
				}
			}
			if !w.solo() && l.Stats().Unwritten > 0 {
				add("flush r=%d step=true", n)
			}
			in = append(in, w.resolveLine(n))
			if ids := sortedKeys(p.awaited); len(ids) > 1 && w.cfg.partial {
				// One at a time, as package group's Outcome does.
				for _, id := range ids {
					add("resolve r=%d ids=%s", n, id)
				}
			}
			if w.cfg.expire && !w.solo() {
				for _, id := range sortedKeys(l.book.reqs) {
					if l.book.reqs[id].phase.resolved() {
						continue
					}
					add("expire r=%d ids=%s", n, id)
					if w.cfg.faults {
						add("expire r=%d ids=%s fail=refused", n, id)
						add("expire r=%d ids=%s fail=unanswered", n, id)
					}
				}
			}
			for _, pool := range w.cfg.pools {
				if _, ok := l.IsPoisoned(pool); ok {
					continue
				}
				add("poison r=%d pool=%s reason=q", n, pool)
				if !w.solo() {
					add("poison r=%d pool=%s reason=q fail=refused", n, pool)
				}
			}
		}
		if pending > 0 {
			add("deliver r=%d n=1", n)
			if pending > 1 {
				add("deliver r=%d", n)
			}
			if w.cfg.reload {
				add("reload r=%d", n)
			}
		}
		lost := w.lost[p.member]
		if !lost && w.losses < w.cfg.losses {
			add("lose r=%d", n)
		}
		if lost && w.cfg.restart {
			add("restart r=%d own=true", n)
		}
	}
	if w.cfg.clear {
		for _, pool := range w.cfg.pools {
			if w.g.s.kvs[w.g.keys.Poison(pool)] != nil {
				add("clear pool=%s", pool)
			}
		}
	}
	if w.cfg.quiesce {
		in = append(in, "quiesce")
		if w.cfg.impatient {
			in = append(in, "quiesce impatient=true")
		}
	}
	return in
}

// script renders inputs as a testdata script of cfg.
func script(t *testing.T, cfg exploreConfig, inputs []string) string {
	w := newWorld(t, cfg)
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n----\n%s\n\n", newLine(cfg), w.render())
	for _, in := range append([]string{"join"}, inputs...) {
		fmt.Fprintf(&b, "%s\n----\n%s\n\n", in, w.step(in))
	}
	return b.String()
}

// newLine is the script's first command, naming cfg's group.
func newLine(cfg exploreConfig) string {
	ids := make([]string, len(cfg.requests))
	for i, id := range cfg.requests {
		ids[i] = string(id)
	}
	return fmt.Sprintf("new size=%d explore=true requests=%s", cfg.size, strings.Join(ids, ","))
}
