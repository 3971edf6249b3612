package core

import (
	"cmp"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The explorer enumerates every order of inputs to a Core up to a depth,
// in breadth-first order, and checks the invariants of
// explore_invariants_test.go after every step. Inputs are the engine's
// commands, the result of every outstanding Work (the double's answer, a
// whole-call failure with each code, a failure of one item, a timeout
// after the call took effect), a transfer ending DONE or FAILED,
// notifications, rounds (poll; round, whose queries the double answers at
// once, so that what a round leads to is one input away), the clock
// reaching the next deadline core or the world knows of, and a fence
// (the transport killed, then a new one attached). A state seen before
// (stateHasher) is not expanded again. The first violation found is
// printed as an async testdata script, the shortest such sequence, since
// the search is breadth first: copied into core/testdata it fails until
// the rule is kept again.
var (
	exploreLarge = flag.Bool("explore.large", false, "explore the larger bound (make explore) instead of the CI bound")
	exploreDepth = flag.Int("explore.depth", 0, "override every configuration's depth")
)

// exploreConfig is one configuration of the explorer: the world, the
// inputs it offers, and its bounds.
type exploreConfig struct {
	name          string
	peers         []string
	ranks         int // ranks per peer, so parts per read or write
	pools         int
	requests      int
	kinds         []string // read, write, send, recv
	holdCap       time.Duration
	lease         time.Duration
	policy        EscalationPolicy
	events        bool
	initiatedOnly bool
	// retries: every issued request may be retried (its id and token again).
	retries bool
	// prefix is played before the search, which starts from where it ends:
	// a rule whose breaking needs more inputs than the bound starts closer.
	prefix []string
	// wholeCodes and itemCodes are the failures offered for every
	// outstanding Work, as a whole and for each of its first two items;
	// applied adds a timeout after the call took effect.
	wholeCodes, itemCodes []string
	applied               bool
	depth                 int
	// maxStates stops a configuration that outgrows its bound.
	maxStates int
}

var allCodes = []string{"BUSY", "NOT_FOUND", "TIMEOUT", "BACKEND", "REMOTE_DISCONNECT", "CANCELED"}

// exploreConfigs are the CI bound's configurations; the larger bound
// deepens each and offers every code.
func exploreConfigs(large bool) []exploreConfig {
	base := exploreConfig{peers: []string{"p", "q"}, pools: 2, requests: 3, holdCap: 3 * time.Second, lease: 5 * time.Second,
		wholeCodes: []string{"TIMEOUT", "BACKEND"}, itemCodes: []string{"BACKEND"}, applied: true, maxStates: 2_000_000}
	pull := base
	pull.name, pull.ranks, pull.kinds, pull.depth = "pull, 2 ranks", 2, []string{"read"}, 7
	pull1 := base
	pull1.name, pull1.ranks, pull1.kinds, pull1.depth, pull1.events = "pull, 1 rank, events", 1, []string{"read"}, 7, true
	push := base
	push.name, push.ranks, push.kinds, push.depth = "push and sends, 1 rank", 1, []string{"write", "send", "recv"}, 6
	quar := base
	quar.name, quar.ranks, quar.kinds, quar.depth, quar.policy, quar.initiatedOnly, quar.retries = "pull, quarantine, initiated fence", 1, []string{"read", "recv"}, 6, EscalateQuarantine, true, true
	notify := base
	notify.name, notify.ranks, notify.kinds, notify.depth, notify.retries = "pull, notifying the producer, 1 rank", 1, []string{"read-notify"}, 7, true
	// Rule 15 needs about ten inputs: this one starts with a read done and
	// released, its consumed notification, the first to the rank, handed
	// out (work 11) and not answered.
	resend := notify
	resend.name, resend.peers, resend.retries, resend.depth = "pull, the first notification outstanding", []string{"p"}, false, 6
	resend.prefix = []string{"connect peer=p ranks=1", "read id=r0 peer=p notify=true", "drain", "state h=7 st=done", "round", "run w=10"}
	cfgs := []exploreConfig{pull, pull1, push, quar, notify, resend}
	for i := range cfgs {
		if large {
			cfgs[i].depth++
			cfgs[i].wholeCodes, cfgs[i].itemCodes = allCodes, allCodes
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
		t.Skip("the explorer runs in the full test run (make test) and make explore")
	}
	for _, cfg := range exploreConfigs(*exploreLarge) {
		if raceEnabled && *exploreDepth == 0 {
			// The race detector slows the explorer tenfold: a shallow
			// search shows that its workers share nothing; make test runs
			// the CI bound without it.
			cfg.depth = 4
		}
		t.Run(cfg.name, func(t *testing.T) {
			res := explore(t, cfg) // go test -v prints its time
			t.Logf("%s: depth %d, %d distinct states, %d steps", cfg.name, res.depth, res.states, res.steps)
			if res.violation != nil {
				t.Fatalf("invariant broken after %d inputs:\n%s\n\nas a script (copy into core/testdata):\n\n%s", len(res.violation), res.why, script(t, cfg, res.violation))
			}
		})
	}
}

// exploreResult is what one configuration's search found.
type exploreResult struct {
	depth, states, steps int
	violation            []string // the inputs that break an invariant
	why                  string
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

// explore searches cfg breadth first to its depth. Every state reached
// is checked and hashed (states counts the distinct ones); those of the
// last depth are expanded no further. Each input is applied to a replay
// of its state's path from a new world (a Core cannot be copied: its
// Work's continuations are closures), so the frontier is expanded by a
// worker per CPU, a batch of states at a time, and each batch merged in
// frontier order: the states found, and the first violation (the
// shortest, since the search is breadth first), are those of a search on
// one goroutine. steps counts every input applied, replays included.
func explore(t testing.TB, cfg exploreConfig) exploreResult {
	defer debug.SetGCPercent(debug.SetGCPercent(400)) // replays make short-lived garbage
	var res exploreResult
	w, err := replayPath(cfg, nil)
	require.NoError(t, err)
	seen := map[uint64]bool{w.hash(): true}
	frontier := []*node{{}}
	workers := runtime.GOMAXPROCS(0)
	for d := 1; d <= cfg.depth && len(frontier) > 0; d++ {
		res.depth = d
		var next []*node
		for lo := 0; lo < len(frontier); lo += exploreBatch {
			batch := frontier[lo:min(lo+exploreBatch, len(frontier))]
			kids, steps, err := expandAll(cfg, batch, workers)
			res.steps += steps
			require.NoError(t, err)
			for i, n := range batch {
				for _, k := range kids[i] {
					if k.violation != "" {
						res.violation, res.why = slices.Concat(cfg.prefix, n.path(), []string{k.input}), k.violation
						res.states = len(seen)
						return res
					}
					if seen[k.hash] {
						continue
					}
					seen[k.hash] = true
					if len(seen) > cfg.maxStates {
						t.Fatalf("%s: more than %d states by depth %d: lower the depth", cfg.name, cfg.maxStates, d)
					}
					if d < cfg.depth {
						next = append(next, &node{parent: n, input: k.input})
					}
				}
			}
		}
		frontier = next
	}
	res.states = len(seen)
	return res
}

// exploreBatch is how many frontier states the workers expand between two
// merges: it bounds the children held at once.
const exploreBatch = 2048

// child is one input applied to a frontier state, and what it led to.
type child struct {
	input     string
	hash      uint64
	violation string
}

// expandAll expands every node of batch on workers goroutines: kids[i]
// are batch[i]'s children in input order. A worker skips the nodes after
// the first one that has a violating child: the merge stops there.
func expandAll(cfg exploreConfig, batch []*node, workers int) (kids [][]child, steps int, err error) {
	kids = make([][]child, len(batch))
	var (
		nextNode, stop, total atomic.Int64
		mu                    sync.Mutex
		wg                    sync.WaitGroup
	)
	stop.Store(int64(len(batch)))
	for range workers {
		wg.Go(func() {
			for {
				i := nextNode.Add(1) - 1
				if i >= int64(len(batch)) || i > stop.Load() {
					return
				}
				ks, n, e := expand(cfg, batch[i].path())
				total.Add(int64(n))
				if e != nil {
					mu.Lock()
					err = cmp.Or(err, e)
					mu.Unlock()
					return
				}
				kids[i] = ks
				if slices.ContainsFunc(ks, func(k child) bool { return k.violation != "" }) {
					for cur := stop.Load(); i < cur && !stop.CompareAndSwap(cur, i); cur = stop.Load() {
					}
				}
			}
		})
	}
	wg.Wait()
	return kids, int(total.Load()), err
}

// expand applies each input the state at path offers to a replay of it.
// It stops at the first input that breaks an invariant.
func expand(cfg exploreConfig, path []string) ([]child, int, error) {
	w, err := replayPath(cfg, path)
	if err != nil {
		return nil, 0, err
	}
	steps := len(path)
	inputs := w.inputs()
	kids := make([]child, 0, len(inputs))
	for i, in := range inputs {
		if i > 0 {
			if w, err = replayPath(cfg, path); err != nil {
				return nil, steps, err
			}
			steps += len(path)
		}
		if _, err := w.step(in); err != nil {
			return nil, steps, fmt.Errorf("input %q after %v: %w", in, path, err)
		}
		steps++
		if w.violation != "" {
			return append(kids, child{input: in, violation: w.violation}), steps, nil
		}
		kids = append(kids, child{input: in, hash: w.hash()})
	}
	return kids, steps, nil
}

// replayPath is a new world of cfg after its prefix and path.
func replayPath(cfg exploreConfig, path []string) (*world, error) {
	w, err := newWorld(cfg, true)
	if err != nil {
		return nil, err
	}
	for _, in := range cfg.prefix {
		if _, err := w.step(in); err != nil {
			return nil, fmt.Errorf("prefix %q: %w", in, err)
		}
		if w.violation != "" {
			return nil, fmt.Errorf("prefix %q: %s", in, w.violation)
		}
	}
	for _, in := range path {
		if _, err := w.step(in); err != nil {
			return nil, fmt.Errorf("replaying %q of %v: %w", in, path, err)
		}
	}
	return w, nil
}

// inputs lists every input the world offers now, in a fixed order.
func (w *world) inputs() []string {
	var in []string
	for _, wk := range w.out {
		in = append(in, fmt.Sprintf("run w=%d", wk.ID))
		if w.dead[wk.Epoch] {
			continue // its result is the dead process's, whatever it is
		}
		for _, c := range w.cfg.wholeCodes {
			in = append(in, fmt.Sprintf("run w=%d whole=%s", wk.ID, c))
		}
		if w.cfg.applied && mutates(wk.Kind) {
			in = append(in, fmt.Sprintf("run w=%d whole=TIMEOUT applied=true", wk.ID))
		}
		for k := range min(2, items(wk)) {
			for _, c := range w.cfg.itemCodes {
				// An item's NOT_FOUND on a release says the resource is gone
				// (the contract), so core takes it as released: the double
				// answers it where that is true, and injecting it where the
				// resource lives would be a transport breaking the contract.
				if c == "NOT_FOUND" && releases(wk.Kind) {
					continue
				}
				in = append(in, fmt.Sprintf("run w=%d item=%d code=%s", wk.ID, k, c))
			}
		}
	}
	if len(w.out) > 1 {
		in = append(in, "drain")
	}
	if d := w.ds[w.epoch]; d != nil && !w.dead[w.epoch] {
		for _, h := range d.live() {
			if !d.handles[h].Terminal() {
				in = append(in, fmt.Sprintf("state h=%d st=done", h), fmt.Sprintf("state h=%d st=failed", h))
			}
		}
	}
	if !w.closed {
		for _, p := range w.cfg.peers {
			switch {
			case w.c.Connected(p):
				in = append(in, "remove peer="+p)
			case !w.c.Handshaking(p):
				in = append(in, fmt.Sprintf("connect peer=%s ranks=%d", p, w.cfg.ranks))
			}
		}
		if w.next < w.cfg.requests {
			for _, k := range w.cfg.kinds {
				for _, p := range w.cfg.peers {
					// "read-notify": a read that notifies its producer once
					// every part is DONE and released.
					if k == "read-notify" {
						in = append(in, fmt.Sprintf("read id=r%d peer=%s notify=true", w.next, p))
						continue
					}
					in = append(in, fmt.Sprintf("%s id=r%d peer=%s", k, w.next, p))
				}
			}
		}
	}
	if w.cfg.retries && !w.closed {
		for _, id := range w.order {
			in = append(in, "retry id="+string(id))
		}
	}
	for _, id := range w.order {
		r := w.issued[id]
		if r.reported || r.kind == "read" {
			continue
		}
		for k := range w.cfg.ranks {
			if a := fmt.Sprintf("%s%d", r.peer, k); !r.notified[a] {
				in = append(in, fmt.Sprintf("notify id=%s from=%s", id, a))
			}
		}
	}
	in = append(in, "poll", "round")
	// The clock moves to the earliest deadline core or the world knows of
	// (in a correct core the world's are never earlier than core's).
	at := w.c.next().At
	if !at.After(w.now) {
		at = time.Time{}
	}
	if wat := w.deadline(); !wat.IsZero() && (at.IsZero() || wat.Before(at)) {
		at = wat
	}
	if !at.IsZero() {
		in = append(in, fmt.Sprintf("tick d=%v", at.Sub(w.now)))
	}
	switch {
	case !w.dead[w.epoch]:
		in = append(in, "kill")
	case !w.closed:
		in = append(in, "attach")
	}
	if !w.closed {
		in = append(in, "close")
	}
	return in
}

// mutates reports whether a call of kind changes the transport, so that
// it may have taken effect when it timed out.
func mutates(k WorkKind) bool {
	switch k {
	case WorkPoll, WorkEvents, WorkNotifications:
		return false
	}
	return true
}

// releases reports whether a call of kind releases what its items name.
func releases(k WorkKind) bool {
	switch k {
	case WorkRelease, WorkReleaseDescriptors, WorkUnloadPeers, WorkDeregisterMemory:
		return true
	}
	return false
}

// items is how many items a Work's call carries.
func items(wk Work) int {
	return max(len(wk.Posts), len(wk.Handles), len(wk.Notes), len(wk.Regions), len(wk.RegionIDs),
		len(wk.Peers), len(wk.PeerIDs), len(wk.Dlists), len(wk.DlistIDs))
}

// script renders inputs as an async testdata script of cfg.
func script(t testing.TB, cfg exploreConfig, inputs []string) string {
	w, err := newWorld(cfg, false)
	require.NoError(t, err)
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n----\n%s\n\n", newLine(cfg), w.render(len(w.log), nil))
	for _, in := range inputs {
		out, err := w.step(in)
		require.NoError(t, err)
		fmt.Fprintf(&b, "%s\n----\n%s\n\n", in, out)
	}
	return b.String()
}

// newLine is the script's first command, naming cfg's world.
func newLine(cfg exploreConfig) string {
	policy := map[EscalationPolicy]string{EscalateFence: "fence", EscalateQuarantine: "quarantine", EscalateReleaseAndReuse: "reuse"}[cfg.policy]
	return fmt.Sprintf("new async=true ranks=%d pools=%d cap=%v lease=%v policy=%s events=%v scope=%s",
		cfg.ranks, cfg.pools, cfg.holdCap, cfg.lease, policy, cfg.events, map[bool]string{false: "incoming", true: "initiated"}[cfg.initiatedOnly])
}
