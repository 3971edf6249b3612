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
// since a broken check may leave its transport in any state). An agent
// whose process died (and the check did not kill it) is reported once,
// with how it ended, and skipped: every call to it would only fail again.
func (e *env) teardown() {
	e.tearingDown = true
	for _, a := range e.agents {
		if msg := a.exited(nil); msg != "" {
			e.reportExit(a, msg)
		}
	}
	for _, a := range e.agents {
		if a.up() && len(a.heldHandles) > 0 {
			a.settleAndRelease(a.report)
		}
	}
	for _, a := range e.agents {
		if !a.up() || a.closed {
			continue
		}
		freeAll(a, "ReleaseDescriptors", &a.heldDlists, a.tr.ReleaseDescriptors, a.report)
		freeAll(a, "UnloadPeers", &a.heldPeers, a.tr.UnloadPeers, a.report)
		freeAll(a, "DeregisterMemory", &a.heldRegions, a.tr.DeregisterMemory, a.report)
	}
	for _, a := range e.agents {
		if a.up() && !a.closed {
			ctx, cancel := e.callCtx()
			if r, err := a.tr.Resources(ctx); err != nil {
				a.report("Resources(agent %q): %v", a.name, err)
			} else if !r.Zero() {
				a.report("agent %q still counts %+v after everything the check created was freed: a leak", a.name, r)
			}
			if a.up() {
				if err := a.tr.Close(ctx); err != nil {
					a.report("Close(agent %q) after freeing everything: %v", a.name, err)
				}
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

// up reports whether the teardown still calls the agent: its process
// was neither killed by the check nor found dead.
func (a *agent) up() bool { return !a.killed && !a.dead }

// report is a teardown failure on agent a. When one of its arguments says
// the agent's process is gone, the death is reported once instead
// (reportExit), and the agent's teardown ends there.
func (a *agent) report(format string, args ...any) {
	for _, arg := range args {
		if err, ok := arg.(error); ok {
			if msg := a.exited(err); msg != "" {
				a.e.reportExit(a, msg)
				return
			}
		}
	}
	if !a.up() {
		return // the death was reported; what follows from it is noise
	}
	if a.e.t.Failed() {
		a.e.t.Logf("teardown: "+format, args...)
		return
	}
	a.e.t.Errorf("teardown: "+format, args...)
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
		if !a.up() {
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
				if err != nil && a.up() {
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
		if err != nil && a.up() {
			report("%s(%v of agent %q): %v", what, ids[i], a.name, err)
		}
	}
	untrack(a, list, ids...)
}
