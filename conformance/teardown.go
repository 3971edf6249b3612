package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// teardown frees, in contract order, everything the check left behind on
// every agent: handles (canceled, polled until terminal, released), then
// dlists, peers and regions, then Close, then the factory's Stop. A failure
// here fails the check unless it already failed (then it is only logged,
// since a broken check may leave its transport in any state).
func (e *env) teardown() {
	e.tearingDown = true
	report := func(format string, args ...any) {
		if e.t.Failed() {
			e.t.Logf("teardown: "+format, args...)
			return
		}
		e.t.Errorf("teardown: "+format, args...)
	}
	for _, a := range e.agents {
		if !a.killed && len(a.heldHandles) > 0 {
			a.settleAndRelease(report)
		}
	}
	for _, a := range e.agents {
		if a.killed || a.closed {
			continue
		}
		freeAll(a, "ReleaseDescriptors", &a.heldDlists, a.tr.ReleaseDescriptors, report)
		freeAll(a, "UnloadPeers", &a.heldPeers, a.tr.UnloadPeers, report)
		freeAll(a, "DeregisterMemory", &a.heldRegions, a.tr.DeregisterMemory, report)
	}
	for _, a := range e.agents {
		if !a.killed && !a.closed {
			ctx, cancel := e.callCtx()
			if r, err := a.tr.Resources(ctx); err != nil {
				report("Resources(agent %q): %v", a.name, err)
			} else if !r.Zero() {
				report("agent %q still counts %+v after everything the check created was freed: a leak", a.name, r)
			}
			if err := a.tr.Close(ctx); err != nil && !errors.Is(err, sdk.ErrPluginShutdown) {
				report("Close(agent %q) after freeing everything: %v", a.name, err)
			}
			cancel()
			a.closed = true
		}
		if a.ag.Stop != nil {
			a.ag.Stop()
		}
	}
	e.agents = nil
}

// settleAndRelease cancels the agent's tracked handles, waits for them to
// turn terminal and releases them.
func (a *agent) settleAndRelease(report func(string, ...any)) {
	ids := append([]sdk.HandleID(nil), a.heldHandles...)
	ctx, cancel := a.e.callCtx()
	_, _ = a.tr.Cancel(ctx, ids)
	cancel()
	deadline := time.Now().Add(settleTimeout)
	var b backoff
	for len(ids) > 0 {
		ctx, cancel := a.e.callCtx()
		st, err := a.tr.Poll(ctx, ids)
		cancel()
		if err != nil || len(st) != len(ids) {
			report("Poll(%d handles of agent %q): %v", len(ids), a.name, err)
			return
		}
		var terminal, running []sdk.HandleID
		for i, s := range st {
			switch {
			case s.Err != nil && errors.Is(s.Err, sdk.ErrNotFound):
				report("handle %d of agent %q: Poll says NOT_FOUND but it was never released", ids[i], a.name)
				untrack(a, &a.heldHandles, ids[i])
			case s.Err == nil && s.State.Terminal():
				terminal = append(terminal, ids[i])
			default:
				running = append(running, ids[i])
			}
		}
		if len(terminal) > 0 {
			ctx, cancel := a.e.callCtx()
			errs, err := a.tr.Release(ctx, terminal)
			cancel()
			if err != nil {
				report("Release(%d terminal handles of agent %q): %v", len(terminal), a.name, err)
				return
			}
			for i, err := range errs {
				if err != nil {
					report("Release(terminal handle %d of agent %q): %v", terminal[i], a.name, err)
				}
			}
			untrack(a, &a.heldHandles, terminal...)
		}
		ids = running
		if len(ids) > 0 && time.Now().After(deadline) {
			report("%d handles of agent %q still not terminal %v after Cancel (first: %d)", len(ids), a.name, settleTimeout, ids[0])
			return
		}
		b.wait()
	}
}

// freeAll frees the tracked ids of one kind with its batched free call and
// forgets them.
func freeAll[ID comparable](a *agent, what string, list *[]ID, free func(context.Context, []ID) ([]error, error), report func(string, ...any)) {
	ids := append([]ID(nil), (*list)...)
	if len(ids) == 0 {
		return
	}
	ctx, cancel := a.e.callCtx()
	defer cancel()
	errs, err := free(ctx, ids)
	if err != nil {
		report("%s(%d ids of agent %q): %v", what, len(ids), a.name, err)
		return
	}
	for i, err := range errs {
		if err != nil {
			report("%s(%v of agent %q): %v", what, ids[i], a.name, err)
		}
	}
	untrack(a, list, ids...)
}
