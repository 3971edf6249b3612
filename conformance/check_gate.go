package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"path/filepath"

	"github.com/custody-dev/custody/sdk"
	pluginagent "github.com/custody-dev/custody/sdk/plugin/agent"
)

// gateCall is a call the gate of Open and Close must refuse: its code, and
// whether it created something a broken transport must be asked to free.
type gateCall struct {
	name string
	call func(ctx context.Context) (sdk.Code, error)
}

// gateCalls are the calls an agent that is not open refuses with
// INVALID_ARGUMENT. Each is one an open agent would answer otherwise (OK,
// or NOT_FOUND for an unknown id), so that a transport without the gate
// is caught; none creates anything on an open agent but RegisterMemory,
// which undo frees should a broken transport accept it.
func gateCalls(tr sdk.Transport, events bool, regionPath string, undo func(sdk.RegionID)) []gateCall {
	one := func(errs []error, err error) (sdk.Code, error) { return codeOf(errs, err), firstErr(errs, err) }
	calls := []gateCall{
		{"RegisterMemory", func(ctx context.Context) (sdk.Code, error) {
			res, err := tr.RegisterMemory(ctx, []sdk.Region{{Path: regionPath, Length: 4096, Kind: sdk.MemoryHost}})
			errs := make([]error, len(res))
			for i, r := range res {
				errs[i] = r.Err
				if r.Err == nil && r.ID != 0 {
					undo(r.ID)
				}
			}
			return one(errs, err)
		}},
		{"LocalMetadata", func(ctx context.Context) (sdk.Code, error) {
			_, err := tr.LocalMetadata(ctx)
			return sdk.CodeOf(err), err
		}},
		{"DeregisterMemory(unknown region)", func(ctx context.Context) (sdk.Code, error) {
			return one(tr.DeregisterMemory(ctx, []sdk.RegionID{1<<63 + 7}))
		}},
		{"UnloadPeers(unknown peer)", func(ctx context.Context) (sdk.Code, error) {
			return one(tr.UnloadPeers(ctx, []sdk.PeerID{1<<63 + 7}))
		}},
		{"ReleaseDescriptors(unknown dlist)", func(ctx context.Context) (sdk.Code, error) {
			return one(tr.ReleaseDescriptors(ctx, []sdk.DlistID{1<<63 + 7}))
		}},
		{"Poll(unknown handle)", func(ctx context.Context) (sdk.Code, error) {
			st, err := tr.Poll(ctx, []sdk.HandleID{unknownHandle})
			if err == nil && len(st) == 1 {
				err = st[0].Err
			}
			return sdk.CodeOf(err), err
		}},
		{"Cancel(unknown handle)", func(ctx context.Context) (sdk.Code, error) {
			return one(tr.Cancel(ctx, []sdk.HandleID{unknownHandle}))
		}},
		{"Release(unknown handle)", func(ctx context.Context) (sdk.Code, error) {
			return one(tr.Release(ctx, []sdk.HandleID{unknownHandle}))
		}},
		{"Notifications", func(ctx context.Context) (sdk.Code, error) {
			_, err := tr.Notifications(ctx, 0)
			return sdk.CodeOf(err), err
		}},
	}
	// Events is in the contract only where Describe claims it; elsewhere
	// it is UNSUPPORTED whether or not the agent is open.
	if src, ok := tr.(sdk.EventSource); ok && events {
		calls = append(calls, gateCall{"Events", func(ctx context.Context) (sdk.Code, error) {
			_, err := src.Events(ctx, 0)
			return sdk.CodeOf(err), err
		}})
	}
	return calls
}

// checkGate: an agent answers nothing but Describe before Open and after
// Close.
var checkGate = check{
	name: "contract/before-open-after-close",
	doc: "before Open, every call but Describe (RegisterMemory, LocalMetadata, the frees, Poll, Cancel, Release, Notifications, and Events where claimed) and Close are INVALID_ARGUMENT; " +
		"after Close the same calls are INVALID_ARGUMENT and Close again is OK; each is asked --repeat (default 100) times, 8 at a time",
	needs: always,
	run: func(e *env) {
		ctx, cancel := e.callCtx()
		ag, err := e.cfg.New(ctx)
		cancel()
		if err != nil {
			e.t.Fatalf("factory: start agent: %v", err)
		}
		if ag.Stop != nil {
			e.t.Cleanup(ag.Stop)
		}
		tr := ag.Transport
		path := filepath.Join(e.dir, "gate")
		f, err := pluginagent.CreateFile(path, 4096)
		if err != nil {
			e.t.Fatalf("create region file: %v", err)
		}
		_ = f.Close()
		var accepted []sdk.RegionID
		calls := gateCalls(tr, e.desc.Capabilities.Events, path, func(id sdk.RegionID) { accepted = append(accepted, id) })
		refuse := func(when string, open bool) {
			e.t.Helper()
			e.parallel(e.cfg.Repeat, func(t T, _, i int) {
				c := calls[i%len(calls)]
				if c.name == "RegisterMemory" && i >= len(calls) {
					return // once is enough: a broken transport would register each
				}
				ctx, cancel := e.callCtx()
				got, err := c.call(ctx)
				cancel()
				if got != sdk.CodeInvalidArgument {
					t.Fatalf("%s %s: code %v (%v), want INVALID_ARGUMENT: any call but Describe %s is refused", c.name, when, got, err, map[bool]string{false: "before Open", true: "after Close"}[open])
				}
			})
		}
		refuse("before Open", false)
		ctx, cancel = e.callCtx()
		defer cancel()
		if err := tr.Close(ctx); !is(err, sdk.CodeInvalidArgument) {
			e.t.Errorf("Close before Open: %v, want INVALID_ARGUMENT", err)
		}
		var salt [4]byte
		_, _ = rand.Read(salt[:])
		name := e.prefix + "-gate-" + hex.EncodeToString(salt[:])
		if err := tr.Open(ctx, sdk.OpenRequest{Agent: name, Params: maps.Clone(e.cfg.Params)}); err != nil {
			e.t.Fatalf("Open(agent %q) after the refused calls: %v: a refused call must change nothing", name, err)
		}
		if len(accepted) > 0 {
			// A broken transport registered before Open: free it so that
			// Close can succeed.
			_, _ = tr.DeregisterMemory(ctx, accepted)
			accepted = nil
		}
		if err := tr.Close(ctx); err != nil {
			e.t.Fatalf("Close(agent %q) holding nothing: %v", name, err)
		}
		refuse("after Close", true)
		if err := tr.Close(ctx); err != nil {
			e.t.Errorf("Close of a closed agent: %v, want OK (it has ended and holds nothing)", err)
		}
	},
}

// checkOpenOnce: Open refuses what it does not understand, and opens once.
var checkOpenOnce = check{
	name: "contract/open-once",
	doc: "Open with an unknown parameter, or an empty agent name, is INVALID_ARGUMENT and leaves the agent unopened (a good Open then succeeds); " +
		"a second Open, with the same name or another, is INVALID_ARGUMENT and the agent keeps working",
	needs: always,
	run: func(e *env) {
		ctx, cancel := e.callCtx()
		defer cancel()
		ag, err := e.cfg.New(ctx)
		if err != nil {
			e.t.Fatalf("factory: start agent: %v", err)
		}
		a := &agent{e: e, t: e.t, agentState: &agentState{name: e.prefix + "-open", tr: ag.Transport, ag: ag, live: map[any]bool{}}}
		opened := false
		e.t.Cleanup(func() {
			if !opened && ag.Stop != nil {
				ag.Stop() // else the teardown stops it
			}
		})
		unknown := maps.Clone(e.cfg.Params)
		if unknown == nil {
			unknown = map[string]string{}
		}
		unknown["conformance-no-such-parameter"] = "1"
		for _, tc := range []struct {
			what string
			req  sdk.OpenRequest
		}{
			{"an unknown parameter", sdk.OpenRequest{Agent: a.name, Params: unknown}},
			{"an empty agent name", sdk.OpenRequest{Params: maps.Clone(e.cfg.Params)}},
		} {
			for range max(1, e.cfg.Repeat/10) {
				if err := a.tr.Open(ctx, tc.req); !is(err, sdk.CodeInvalidArgument) {
					if err == nil {
						opened = true
						e.agents = append(e.agents, a)
					}
					e.t.Fatalf("Open with %s: %v, want INVALID_ARGUMENT (the agent is not opened)", tc.what, err)
				}
			}
		}
		if err := a.tr.Open(ctx, sdk.OpenRequest{Agent: a.name, Params: maps.Clone(e.cfg.Params)}); err != nil {
			e.t.Fatalf("Open(agent %q) after refused Opens: %v: a refused Open leaves the agent unopened", a.name, err)
		}
		opened = true
		e.agents = append(e.agents, a)
		for i := range max(1, e.cfg.Repeat/10) {
			name := a.name
			if i%2 == 1 {
				name += "-again"
			}
			if err := a.tr.Open(ctx, sdk.OpenRequest{Agent: name, Params: maps.Clone(e.cfg.Params)}); !is(err, sdk.CodeInvalidArgument) {
				e.t.Fatalf("a second Open (agent %q): %v, want INVALID_ARGUMENT: an agent opens once", name, err)
			}
		}
		// The refused Opens changed nothing: the agent still works.
		r := a.region(4096)
		if md := a.metadata(); len(md) == 0 {
			e.t.Errorf("LocalMetadata after refused Opens is empty")
		}
		a.deregister(r.ID)
	},
}
