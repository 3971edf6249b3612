package conformance

import (
	"context"
	"fmt"
	"sync"

	"github.com/custody-dev/custody/sdk"
	pluginagent "github.com/custody-dev/custody/sdk/plugin/agent"
)

// agent is one opened transport of a check with the tracker of every
// resource the check created on it. Helpers that create record the id;
// helpers that free forget it; the env's teardown frees what is left.
//
// An agent value is a view of one agent for one T: the check's own, or a
// worker's (env.parallel), so that helpers called from a worker goroutine
// report to it. Every view of an agent shares its state and tracker.
type agent struct {
	e *env
	t T
	*agentState
}

// agentState is what every view of one agent shares. mu guards the
// tracker, which workers of a parallel check update at once.
type agentState struct {
	name   string
	tr     sdk.Transport
	ag     Agent
	killed bool
	closed bool
	// dead is set once its process is found gone although the check did
	// not kill it (exited): the teardown skips it.
	dead bool

	mu          sync.Mutex
	heldRegions []sdk.RegionID
	heldPeers   []sdk.PeerID
	heldDlists  []sdk.DlistID
	heldHandles []sdk.HandleID
	live        map[any]bool // every tracked id, keyed by its typed value
}

// as returns a view of the agent whose helpers report to t.
func (a *agent) as(t T) *agent { return &agent{e: a.e, t: t, agentState: a.agentState} }

// agent starts and opens a fresh agent with the configured params.
func (e *env) agent() *agent {
	e.t.Helper()
	ctx, cancel := e.callCtx()
	defer cancel()
	var (
		ag       Agent
		startErr error
	)
	start := func(ctx context.Context) (sdk.Transport, func(), error) {
		if ag, startErr = e.cfg.New(ctx); startErr != nil {
			return nil, nil, startErr
		}
		if ag.Stop == nil {
			return ag.Transport, func() {}, nil
		}
		return ag.Transport, ag.Stop, nil
	}
	name := fmt.Sprintf("%s-%d", e.prefix, len(e.agents))
	opened, err := pluginagent.Open(ctx, start, name, e.cfg.Params)
	switch {
	case startErr != nil:
		e.t.Fatalf("factory: start agent: %v", startErr)
	case err != nil:
		e.t.Fatalf("%v (params %v)", err, e.cfg.Params)
	}
	a := &agent{e: e, t: e.t, agentState: &agentState{name: name, tr: opened.Transport, ag: ag, live: map[any]bool{}}}
	e.agents = append(e.agents, a)
	return a
}

// track records ids the check now owns.
func track[ID comparable](a *agent, list *[]ID, ids ...ID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range ids {
		if !a.live[id] {
			a.live[id] = true
			*list = append(*list, id)
		}
	}
}

// untrack forgets ids the check freed itself.
func untrack[ID comparable](a *agent, list *[]ID, ids ...ID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	gone := map[ID]bool{}
	for _, id := range ids {
		gone[id] = true
		delete(a.live, id)
	}
	kept := (*list)[:0]
	for _, id := range *list {
		if !gone[id] {
			kept = append(kept, id)
		}
	}
	*list = kept
}

// kill ends the agent's process. The caller has checked ag.Kill != nil.
func (a *agent) kill() {
	a.t.Helper()
	if err := a.ag.Kill(); err != nil {
		a.t.Fatalf("kill agent %q: %v", a.name, err)
	}
	a.killed = true
}
