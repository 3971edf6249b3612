package conformance

import (
	"fmt"
	"maps"

	"github.com/custody-dev/custody/sdk"
)

// agent is one opened transport of a check with the tracker of every
// resource the check created on it. Helpers that create record the id;
// helpers that free forget it; the env's teardown frees what is left.
type agent struct {
	e      *env
	name   string
	tr     sdk.Transport
	ag     Agent
	killed bool
	closed bool
	// dead is set once its process is found gone although the check did
	// not kill it (exited): the teardown skips it.
	dead bool

	heldRegions []sdk.RegionID
	heldPeers   []sdk.PeerID
	heldDlists  []sdk.DlistID
	heldHandles []sdk.HandleID
	live        map[any]bool // every tracked id, keyed by its typed value
}

// agent starts and opens a fresh agent with the configured params.
func (e *env) agent() *agent {
	e.t.Helper()
	ctx, cancel := e.callCtx()
	defer cancel()
	ag, err := e.cfg.New(ctx)
	if err != nil {
		e.t.Fatalf("factory: start agent: %v", err)
	}
	a := &agent{e: e, name: fmt.Sprintf("%s-%d", e.prefix, len(e.agents)), tr: ag.Transport, ag: ag, live: map[any]bool{}}
	if err := a.tr.Open(ctx, sdk.OpenRequest{Agent: a.name, Params: maps.Clone(e.cfg.Params)}); err != nil {
		if ag.Stop != nil {
			ag.Stop()
		}
		e.t.Fatalf("Open(agent %q, params %v): %v", a.name, e.cfg.Params, err)
	}
	e.agents = append(e.agents, a)
	return a
}

// track records ids the check now owns.
func track[ID comparable](a *agent, list *[]ID, ids ...ID) {
	for _, id := range ids {
		if !a.live[id] {
			a.live[id] = true
			*list = append(*list, id)
		}
	}
}

// untrack forgets ids the check freed itself.
func untrack[ID comparable](a *agent, list *[]ID, ids ...ID) {
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
	a.e.t.Helper()
	if err := a.ag.Kill(); err != nil {
		a.e.t.Fatalf("kill agent %q: %v", a.name, err)
	}
	a.killed = true
}
