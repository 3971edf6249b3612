package conformance

import (
	"bytes"
	"context"
	"path/filepath"

	"github.com/custody-dev/custody/sdk"
)

// badCall is one malformed call and the code it must get.
type badCall struct {
	name string
	want sdk.Code
	call func(ctx context.Context) (sdk.Code, error)
}

// checkBadArguments: malformed input gets INVALID_ARGUMENT (or NOT_FOUND for
// an unknown id freed directly) and changes nothing.
var checkBadArguments = check{
	name: "contract/bad-arguments",
	doc: "index out of range, length mismatch, unknown region or peer, empty lists, oversized notification, garbage metadata and the like " +
		"are INVALID_ARGUMENT and change nothing on either agent; each asked once alone, then --repeat (default 100) times more, 8 at a time",
	needs: movesData,
	run: func(e *env) {
		l := e.link(4096)
		a := l.a
		// ld: [0,100) [100,300); rd: [0,100) [100,200).
		ld := a.dlist(0, l.src.desc(0, 100), l.src.desc(100, 200))
		rd := a.dlist(l.peer, l.dst.desc(0, 100), l.dst.desc(100, 100))
		post := func(p sdk.PostSpec) func(ctx context.Context) (sdk.Code, error) {
			return func(ctx context.Context) (sdk.Code, error) {
				res, err := a.tr.Post(ctx, []sdk.PostSpec{p})
				for _, r := range res {
					if r.Err == nil && r.ID != 0 {
						track(a, &a.heldHandles, r.ID)
					}
				}
				if err == nil && len(res) == 1 {
					err = res[0].Err
				}
				return sdk.CodeOf(err), err
			}
		}
		ok := sdk.PostSpec{Op: sdk.OpWrite, Local: ld, LocalIndices: []uint32{0}, Remote: rd, RemoteIndices: []uint32{0}}
		with := func(f func(*sdk.PostSpec)) sdk.PostSpec {
			p := ok
			p.LocalIndices = append([]uint32(nil), ok.LocalIndices...)
			p.RemoteIndices = append([]uint32(nil), ok.RemoteIndices...)
			f(&p)
			return p
		}
		prepare := func(s sdk.DlistSpec) func(ctx context.Context) (sdk.Code, error) {
			return func(ctx context.Context) (sdk.Code, error) {
				res, err := a.tr.PrepareDescriptors(ctx, []sdk.DlistSpec{s})
				for _, r := range res {
					if r.Err == nil && r.ID != 0 {
						track(a, &a.heldDlists, r.ID)
					}
				}
				if err == nil && len(res) == 1 {
					err = res[0].Err
				}
				return sdk.CodeOf(err), err
			}
		}
		register := func(r sdk.Region) func(ctx context.Context) (sdk.Code, error) {
			return func(ctx context.Context) (sdk.Code, error) {
				res, err := a.tr.RegisterMemory(ctx, []sdk.Region{r})
				for _, x := range res {
					if x.Err == nil && x.ID != 0 {
						track(a, &a.heldRegions, x.ID)
					}
				}
				if err == nil && len(res) == 1 {
					err = res[0].Err
				}
				return sdk.CodeOf(err), err
			}
		}
		load := func(p sdk.PeerSpec) func(ctx context.Context) (sdk.Code, error) {
			return func(ctx context.Context) (sdk.Code, error) {
				res, err := a.tr.LoadPeers(ctx, []sdk.PeerSpec{p})
				for _, x := range res {
					if x.Err == nil && x.ID != 0 {
						track(a, &a.heldPeers, x.ID)
					}
				}
				if err == nil && len(res) == 1 {
					err = res[0].Err
				}
				return sdk.CodeOf(err), err
			}
		}
		batch := func(f func(ctx context.Context) ([]error, error)) func(ctx context.Context) (sdk.Code, error) {
			return func(ctx context.Context) (sdk.Code, error) {
				errs, err := f(ctx)
				return codeOf(errs, err), firstErr(errs, err)
			}
		}
		md := l.b.metadata()
		garbage := bytes.Repeat([]byte{0xde, 0xad}, 64)
		missing := filepath.Join(e.dir, "no-such-region")
		inv := sdk.CodeInvalidArgument
		cases := []badCall{
			{"RegisterMemory(missing file)", inv, register(sdk.Region{Path: missing, Length: 4096, Kind: sdk.MemoryHost})},
			{"RegisterMemory(zero length)", inv, register(sdk.Region{Path: l.src.File.Name(), Length: 0, Kind: sdk.MemoryHost})},
			{"RegisterMemory(past end of file)", inv, register(sdk.Region{Path: l.src.File.Name(), Length: 1 << 20, Kind: sdk.MemoryHost})},
			{"RegisterMemory(empty path)", inv, register(sdk.Region{Length: 4096, Kind: sdk.MemoryHost})},
			{"DeregisterMemory(unknown region)", sdk.CodeNotFound, batch(func(ctx context.Context) ([]error, error) {
				return a.tr.DeregisterMemory(ctx, []sdk.RegionID{1<<63 + 7})
			})},
			{"LoadPeers(garbage metadata)", inv, load(sdk.PeerSpec{Name: l.b.name, Metadata: garbage})},
			{"LoadPeers(empty metadata)", inv, load(sdk.PeerSpec{Name: l.b.name})},
			{"LoadPeers(truncated metadata)", inv, load(sdk.PeerSpec{Name: l.b.name, Metadata: md[:len(md)/2]})},
			{"LoadPeers(empty name)", inv, load(sdk.PeerSpec{Metadata: md})},
			{"UnloadPeers(unknown peer)", sdk.CodeNotFound, batch(func(ctx context.Context) ([]error, error) {
				return a.tr.UnloadPeers(ctx, []sdk.PeerID{1<<63 + 7})
			})},
			{"PrepareDescriptors(unknown local region)", inv, prepare(sdk.DlistSpec{Descriptors: []sdk.Descriptor{{Region: 1<<63 + 7, Length: 1}}})},
			{"PrepareDescriptors(unknown peer)", inv, prepare(sdk.DlistSpec{Peer: 1<<63 + 7, Descriptors: []sdk.Descriptor{l.dst.desc(0, 1)}})},
			{"PrepareDescriptors(unknown remote region)", inv, prepare(sdk.DlistSpec{Peer: l.peer, Descriptors: []sdk.Descriptor{{Region: 1<<63 + 7, Length: 1}}})},
			{"PrepareDescriptors(local range past region end)", inv, prepare(sdk.DlistSpec{Descriptors: []sdk.Descriptor{l.src.desc(4000, 97)}})},
			{"PrepareDescriptors(remote range past region end)", inv, prepare(sdk.DlistSpec{Peer: l.peer, Descriptors: []sdk.Descriptor{l.dst.desc(1, 4096)}})},
			{"PrepareDescriptors(offset overflow)", inv, prepare(sdk.DlistSpec{Descriptors: []sdk.Descriptor{l.src.desc(1<<64-1, 2)}})},
			{"PrepareDescriptors(zero-length descriptor)", inv, prepare(sdk.DlistSpec{Descriptors: []sdk.Descriptor{l.src.desc(0, 0)}})},
			{"PrepareDescriptors(empty list)", inv, prepare(sdk.DlistSpec{})},
			{"ReleaseDescriptors(unknown dlist)", sdk.CodeNotFound, batch(func(ctx context.Context) ([]error, error) {
				return a.tr.ReleaseDescriptors(ctx, []sdk.DlistID{1<<63 + 7})
			})},
			{"Post(invalid op)", inv, post(with(func(p *sdk.PostSpec) { p.Op = 0 }))},
			{"Post(unknown local dlist)", inv, post(with(func(p *sdk.PostSpec) { p.Local = 1<<63 + 7 }))},
			{"Post(unknown remote dlist)", inv, post(with(func(p *sdk.PostSpec) { p.Remote = 1<<63 + 7 }))},
			{"Post(remote dlist as local)", inv, post(with(func(p *sdk.PostSpec) { p.Local = rd }))},
			{"Post(local dlist as remote)", inv, post(with(func(p *sdk.PostSpec) { p.Remote = ld }))},
			{"Post(local index out of range)", inv, post(with(func(p *sdk.PostSpec) { p.LocalIndices[0] = 2 }))},
			{"Post(remote index out of range)", inv, post(with(func(p *sdk.PostSpec) { p.RemoteIndices[0] = 2 }))},
			{"Post(index counts differ)", inv, post(with(func(p *sdk.PostSpec) { p.RemoteIndices = []uint32{0, 1} }))},
			{"Post(descriptor lengths differ)", inv, post(with(func(p *sdk.PostSpec) { p.LocalIndices[0], p.RemoteIndices[0] = 1, 1 }))},
			{"Post(empty indices)", inv, post(with(func(p *sdk.PostSpec) { p.LocalIndices, p.RemoteIndices = nil, nil }))},
		}
		if e.desc.Capabilities.Notifications {
			if max := e.desc.Limits.MaxNotificationBytes; max > 0 {
				big := make([]byte, max+1)
				cases = append(cases,
					badCall{"Post(oversized notification)", inv, post(with(func(p *sdk.PostSpec) { p.Notification = big }))},
					badCall{"SendNotifications(oversized)", inv, batch(func(ctx context.Context) ([]error, error) {
						return a.tr.SendNotifications(ctx, []sdk.OutboundNotification{{Peer: l.peer, Message: big}})
					})})
			}
			cases = append(cases, badCall{"SendNotifications(unknown peer)", inv, batch(func(ctx context.Context) ([]error, error) {
				return a.tr.SendNotifications(ctx, []sdk.OutboundNotification{{Peer: 1<<63 + 7, Message: []byte("x")}})
			})})
		}
		for _, tc := range cases {
			beforeA, beforeB := a.resources(), l.b.resources()
			ctx, cancel := e.callCtx()
			got, err := tc.call(ctx)
			cancel()
			if got != tc.want {
				e.t.Errorf("%s: code %v (%v), want %v", tc.name, got, err, tc.want)
			}
			if afterA, afterB := a.resources(), l.b.resources(); afterA != beforeA || afterB != beforeB {
				e.t.Errorf("%s: agent a %+v -> %+v, agent b %+v -> %+v", changedResources(tc.name, got, tc.want), beforeA, afterA, beforeB, afterB)
			}
		}
		if e.t.Failed() {
			return
		}
		// Each of them again, --repeat times, 8 at a time: a transport that
		// takes a bad argument one time in ten is caught.
		beforeA, beforeB := a.resources(), l.b.resources()
		e.parallel(e.cfg.Repeat*len(cases), func(t T, _, i int) {
			tc := cases[i%len(cases)]
			ctx, cancel := e.callCtx()
			got, err := tc.call(ctx)
			cancel()
			if got != tc.want {
				t.Fatalf("%s (asked again, %d of %d): code %v (%v), want %v", tc.name, i/len(cases)+1, e.cfg.Repeat, got, err, tc.want)
			}
		})
		if afterA, afterB := a.resources(), l.b.resources(); afterA != beforeA || afterB != beforeB {
			e.t.Errorf("the bad calls, asked again, changed Resources: agent a %+v -> %+v, agent b %+v -> %+v", beforeA, afterA, beforeB, afterB)
		}
		// The good post next to the bad ones still works: nothing broke.
		h := a.post(ok)[0]
		if st := a.wait(h)[0]; st.State != sdk.StateDone {
			e.t.Errorf("a valid post after the refused calls ended %v (%v), want DONE", st.State, st.Reason)
		}
	},
}
