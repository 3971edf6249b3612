package fake

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// TestFaultParseErrors: a malformed rule is INVALID_ARGUMENT naming the
// rule.
func TestFaultParseErrors(t *testing.T) {
	cases := []struct{ value, want string }{
		{"explode", `rule 1 "explode": unknown kind`},
		{"stall;fail,after=x", `rule 2 "fail,after=x": after="x"`},
		{"stall,for=soon", `rule 1 "stall,for=soon": for="soon"`},
		{"fail,code=NOPE", `code="NOPE"`},
		{"stall,rank=1", `kind stall takes no key "rank"`},
		{"fail,prob=2", `prob="2"`},
		{"fail,post=0", `post="0"`},
		{"fail,post", `"post" is not key=value`},
		{"fail,post=1,post=2", `key "post" given twice`},
		{"notif-delay", `notif-delay needs for=DUR`},
		{"crash,at=open", `at="open"`},
		{"crash,peer=b", `kind crash takes no key "peer"`},
		{"post-fail,code=NOPE", `code="NOPE"`},
		{"post-fail,count=1", `kind post-fail takes no key "count"`},
		{"unload-fail,post=1", `kind unload-fail takes no key "post"`},
		{"release-dlist-fail,count=0", `count="0"`},
	}
	for _, c := range cases {
		t.Run(c.value, func(t *testing.T) {
			err := New().Open(ctx, sdk.OpenRequest{Agent: "a", Params: map[string]string{"fault": c.value}})
			require.ErrorIs(t, err, sdk.ErrInvalidArgument)
			require.Contains(t, err.Error(), c.want)
		})
	}
}

// TestParamErrors: every parameter checks its value.
func TestParamErrors(t *testing.T) {
	for _, kv := range [][2]string{
		{"seed", "-1"}, {"chunk", "0"}, {"chunk_delay", "-1s"}, {"fence", "none"}, {"cancel", "maybe"},
		{"dir", "/nonexistent/dir"}, {"misbehave", "lie"}, {"color", "red"}, {"fault_log", "relative.log"},
	} {
		err := New().Open(ctx, sdk.OpenRequest{Agent: "a", Params: map[string]string{kv[0]: kv[1]}})
		require.ErrorIs(t, err, sdk.ErrInvalidArgument, kv[0])
		require.Contains(t, err.Error(), kv[0])
	}
}

// TestFaultStall: a stalled transfer stays IN_PROGRESS and moves no byte
// while later transfers finish; with for=DUR it ends DONE after DUR.
func TestFaultStall(t *testing.T) {
	p := newPair(t, 8192, map[string]string{"fault": "stall,post=1;stall,post=3,for=30ms"}, nil)
	before := readFile(t, p.bPath)
	first := prepare(t, p.a, p.peer, sdk.Descriptor{Region: p.bRegion, Length: 4096})
	second := prepare(t, p.a, p.peer, sdk.Descriptor{Region: p.bRegion, Offset: 4096, Length: 4096})
	local := prepare(t, p.a, 0, sdk.Descriptor{Region: p.aRegion, Length: 4096})
	spec := func(r sdk.DlistID) sdk.PostSpec {
		return sdk.PostSpec{Op: sdk.OpWrite, Local: local, LocalIndices: []uint32{0}, Remote: r, RemoteIndices: []uint32{0}}
	}
	stalled := postOne(t, p.a, spec(first))
	runs := postOne(t, p.a, spec(second))
	require.Equal(t, sdk.StateDone, terminal(t, p.a, runs).State)
	require.Equal(t, sdk.StateInProgress, poll(t, p.a, stalled).State, "the stalled transfer is still running")
	require.Equal(t, before[:4096], readFile(t, p.bPath)[:4096], "and moved no byte")

	start := time.Now()
	timed := postOne(t, p.a, spec(second))
	require.Equal(t, sdk.StateDone, terminal(t, p.a, timed).State)
	require.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond)

	_, err := p.a.Cancel(ctx, []sdk.HandleID{stalled})
	require.NoError(t, err)
	require.Equal(t, sdk.StateCanceled, terminal(t, p.a, stalled).State)
	release(t, p.a, stalled, runs, timed)
	_, err = p.a.ReleaseDescriptors(ctx, []sdk.DlistID{first, second, local})
	require.NoError(t, err)
}

// TestFaultFail: fail and disconnect end the transfer after exactly K
// chunks with their code, and send no notification.
func TestFaultFail(t *testing.T) {
	cases := []struct {
		rule   string
		chunks int
		code   error
	}{
		{"fail", 0, sdk.ErrBackend},
		{"fail,after=2", 2, sdk.ErrBackend},
		{"fail,after=3,code=TIMEOUT", 3, sdk.ErrTimeout},
		{"disconnect,after=1", 1, sdk.ErrRemoteDisconnect},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			p := newPair(t, 64<<10, map[string]string{"chunk": "4096", "fault": c.rule}, nil)
			before, src := readFile(t, p.bPath), readFile(t, p.aPath)
			h := postOne(t, p.a, p.whole(sdk.OpWrite, []byte("note")))
			st := terminal(t, p.a, h)
			require.Equal(t, sdk.StateFailed, st.State)
			require.ErrorIs(t, st.Reason, c.code)
			after := readFile(t, p.bPath)
			n := c.chunks * 4096
			require.True(t, bytes.Equal(after[:n], src[:n]), "the first %d chunks landed", c.chunks)
			require.True(t, bytes.Equal(after[n:], before[n:]), "no later byte did")
			release(t, p.a, h)
			notes, err := p.b.Notifications(ctx, 0)
			require.NoError(t, err)
			require.Empty(t, notes)
		})
	}
}

// TestFaultReleaseAndPollFail: release-fail fails Release K times keeping
// the handle; poll-fail fails Poll K times without a state.
func TestFaultReleaseAndPollFail(t *testing.T) {
	p := newPair(t, 4096, map[string]string{"fault": "release-fail,count=2;poll-fail,post=1,count=2"}, nil)
	h := postOne(t, p.a, p.whole(sdk.OpWrite, nil))
	for i := 0; i < 2; i++ {
		st := poll(t, p.a, h)
		require.ErrorIs(t, st.Err, sdk.ErrBackend)
		require.Zero(t, st.State)
	}
	require.Equal(t, sdk.StateDone, terminal(t, p.a, h).State)
	for i := 0; i < 2; i++ {
		errs, err := p.a.Release(ctx, []sdk.HandleID{h})
		require.NoError(t, err)
		require.ErrorIs(t, errs[0], sdk.ErrBackend)
		require.Equal(t, sdk.StateDone, poll(t, p.a, h).State, "the handle stays held")
	}
	release(t, p.a, h)
	// post=1 selected only the first transfer for poll-fail.
	h2 := postOne(t, p.a, p.whole(sdk.OpWrite, nil))
	require.NoError(t, poll(t, p.a, h2).Err)
	terminal(t, p.a, h2)
	for i := 0; i < 2; i++ {
		errs, err := p.a.Release(ctx, []sdk.HandleID{h2})
		require.NoError(t, err)
		require.ErrorIs(t, errs[0], sdk.ErrBackend, "release-fail without post= selects every transfer")
	}
	release(t, p.a, h2)
}

// TestFaultHandshake: load-peer-fail and prepare-fail fail the K-th item
// with BACKEND and leave it unloaded / unprepared, the others succeed.
func TestFaultHandshake(t *testing.T) {
	a := open(t, "a", map[string]string{"fault": "load-peer-fail,rank=1;prepare-fail,rank=0"})
	b := open(t, "b", nil)
	bPath := regionFile(t, 4096, 0)
	br := register(t, b, sdk.Region{Path: bPath, Length: 4096})
	md, err := b.LocalMetadata(ctx)
	require.NoError(t, err)
	spec := sdk.PeerSpec{Name: "b", Metadata: md}
	res, err := a.LoadPeers(ctx, []sdk.PeerSpec{spec, spec, spec})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	require.ErrorIs(t, res[1].Err, sdk.ErrBackend)
	require.Zero(t, res[1].ID)
	require.NoError(t, res[2].Err)
	r, err := a.Resources(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(2), r.Peers)

	d := sdk.DlistSpec{Peer: res[0].ID, Descriptors: []sdk.Descriptor{{Region: br, Length: 1}}}
	dl, err := a.PrepareDescriptors(ctx, []sdk.DlistSpec{d, d})
	require.NoError(t, err)
	require.ErrorIs(t, dl[0].Err, sdk.ErrBackend)
	require.NoError(t, dl[1].Err)
	r, err = a.Resources(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), r.Dlists)

	_, _ = a.ReleaseDescriptors(ctx, []sdk.DlistID{dl[1].ID})
	_, _ = a.UnloadPeers(ctx, []sdk.PeerID{res[0].ID, res[2].ID})
	_, _ = b.DeregisterMemory(ctx, []sdk.RegionID{br})
}

// TestFaultNotifications: notif-drop loses the selected notifications,
// notif-delay delivers them late; the rest arrive.
func TestFaultNotifications(t *testing.T) {
	p := newPair(t, 4096, map[string]string{"fault": "notif-drop,post=1;notif-delay,post=2,for=40ms"}, nil)
	h1 := postOne(t, p.a, p.whole(sdk.OpWrite, []byte("one")))
	require.Equal(t, sdk.StateDone, terminal(t, p.a, h1).State)
	posted := time.Now()
	h2 := postOne(t, p.a, p.whole(sdk.OpWrite, []byte("two")))
	require.Equal(t, sdk.StateDone, terminal(t, p.a, h2).State)
	h3 := postOne(t, p.a, p.whole(sdk.OpWrite, []byte("three")))
	// The order of "two" and "three" depends on the scheduler; what the fault
	// promises is that "one" never arrives and "two" arrives no sooner than
	// its delay.
	require.ElementsMatch(t, []sdk.Notification{{From: "a", Message: []byte("two")}, {From: "a", Message: []byte("three")}}, drainNotes(t, p.b, 2), "one dropped, two delayed")
	require.GreaterOrEqual(t, time.Since(posted), 40*time.Millisecond)
	more, err := p.b.Notifications(ctx, 0)
	require.NoError(t, err)
	require.Empty(t, more, "the dropped notification arrived")
	release(t, p.a, h1, h2, h3)

	// SendNotifications items are selected too (by peer here).
	q := newPair(t, 4096, map[string]string{"fault": "notif-drop,peer=b,times=1"}, nil)
	errs, err := q.a.SendNotifications(ctx, []sdk.OutboundNotification{{Peer: q.peer, Message: []byte("lost")}, {Peer: q.peer, Message: []byte("kept")}})
	require.NoError(t, err)
	require.NoError(t, errs[0], "a dropped message is not an error")
	require.NoError(t, errs[1])
	require.Equal(t, []sdk.Notification{{From: "a", Message: []byte("kept")}}, drainNotes(t, q.b, 1))
}

// TestFaultSelectors: peer= and times= narrow a rule.
func TestFaultSelectors(t *testing.T) {
	p := newPair(t, 4096, map[string]string{"fault": "fail,peer=c;disconnect,peer=b,times=2"}, nil)
	var states []error
	for i := 0; i < 3; i++ {
		h := postOne(t, p.a, p.whole(sdk.OpWrite, nil))
		states = append(states, terminal(t, p.a, h).Reason)
		release(t, p.a, h)
	}
	require.ErrorIs(t, states[0], sdk.ErrRemoteDisconnect)
	require.ErrorIs(t, states[1], sdk.ErrRemoteDisconnect)
	require.NoError(t, states[2], "times=2 spent; peer=c never matched")
}

// TestFaultLoserKeepsBudget: when fail and disconnect both match a
// transfer, only the first applies, and only it spends its times= budget:
// the other still applies to the next transfer it matches.
func TestFaultLoserKeepsBudget(t *testing.T) {
	cases := []struct {
		rules string
		want  []error // reason of posts 1, 2, 3
	}{
		{"fail,post=1;disconnect,times=1", []error{sdk.ErrBackend, sdk.ErrRemoteDisconnect, nil}},
		{"disconnect,post=1;fail,times=1", []error{sdk.ErrRemoteDisconnect, sdk.ErrBackend, nil}},
		{"fail,post=1;disconnect,times=1,prob=1", []error{sdk.ErrBackend, sdk.ErrRemoteDisconnect, nil}},
	}
	for _, c := range cases {
		t.Run(c.rules, func(t *testing.T) {
			p := newPair(t, 4096, map[string]string{"fault": c.rules}, nil)
			for i, want := range c.want {
				h := postOne(t, p.a, p.whole(sdk.OpWrite, nil))
				st := terminal(t, p.a, h)
				if want == nil {
					require.Equal(t, sdk.StateDone, st.State, "post %d: every budget spent", i+1)
				} else {
					require.Equal(t, sdk.StateFailed, st.State, "post %d", i+1)
					require.ErrorIs(t, st.Reason, want, "post %d", i+1)
				}
				release(t, p.a, h)
			}
		})
	}
}

// TestFaultCrash: a crash makes the agent answer PLUGIN_SHUTDOWN from the
// crashing call on, stops its engine, and drops its leases, so a peer's
// transfers into its memory end REMOTE_DISCONNECT (fence of incoming).
func TestFaultCrash(t *testing.T) {
	t.Run("default first post", func(t *testing.T) {
		p := newPair(t, 4096, map[string]string{"fault": "crash"}, nil)
		_, err := p.a.Post(ctx, []sdk.PostSpec{p.whole(sdk.OpWrite, nil)})
		require.ErrorIs(t, err, sdk.ErrPluginShutdown)
		_, err = p.a.Resources(ctx)
		require.ErrorIs(t, err, sdk.ErrPluginShutdown)
		_, err = p.a.Describe(ctx)
		require.ErrorIs(t, err, sdk.ErrPluginShutdown)
		require.ErrorIs(t, p.a.Close(ctx), sdk.ErrPluginShutdown)
	})
	t.Run("at release", func(t *testing.T) {
		p := newPair(t, 4096, map[string]string{"fault": "crash,at=release"}, nil)
		h := postOne(t, p.a, p.whole(sdk.OpWrite, nil))
		terminal(t, p.a, h)
		_, err := p.a.Release(ctx, []sdk.HandleID{h})
		require.ErrorIs(t, err, sdk.ErrPluginShutdown)
		_, err = p.a.Poll(ctx, []sdk.HandleID{h})
		require.ErrorIs(t, err, sdk.ErrPluginShutdown)
	})
	t.Run("at poll n=2 fences incoming", func(t *testing.T) {
		// b crashes on its second Poll while a writes into b's memory.
		g := newGatedPair(t, 64<<10, 4096, nil)
		b := open(t, "b2", map[string]string{"fault": "crash,at=poll,n=2"})
		bPath := regionFile(t, 64<<10, 5)
		br := register(t, b, sdk.Region{Path: bPath, Length: 64 << 10})
		peer := loadPeer(t, g.a, b)
		remote := prepare(t, g.a, peer, sdk.Descriptor{Region: br, Length: 64 << 10})
		h := postOne(t, g.a, sdk.PostSpec{Op: sdk.OpWrite, Local: g.local, LocalIndices: []uint32{0}, Remote: remote, RemoteIndices: []uint32{0}})
		g.steps(1)
		_, err := b.Poll(ctx, nil)
		require.NoError(t, err)
		_, err = b.Poll(ctx, nil)
		require.ErrorIs(t, err, sdk.ErrPluginShutdown)
		_, err = b.LocalMetadata(ctx)
		require.ErrorIs(t, err, sdk.ErrPluginShutdown)
		g.open()
		st := terminal(t, g.a, h)
		require.ErrorIs(t, st.Reason, sdk.ErrRemoteDisconnect)
		release(t, g.a, h)
		_, err = g.a.ReleaseDescriptors(ctx, []sdk.DlistID{remote})
		require.NoError(t, err)
		_, err = g.a.UnloadPeers(ctx, []sdk.PeerID{peer})
		require.NoError(t, err)
	})
}

// TestSeededReplay: the same seed gives the same outcomes, another seed
// other ones.
func TestSeededReplay(t *testing.T) {
	run := func(seed string) string {
		p := newPair(t, 4096, map[string]string{"seed": seed, "fault": "fail,prob=0.5;poll-fail,prob=0.3;release-fail,prob=0.2"}, nil)
		var out strings.Builder
		for i := 0; i < 40; i++ {
			h := postOne(t, p.a, p.whole(sdk.OpWrite, nil))
			for {
				st := poll(t, p.a, h)
				if st.Err != nil {
					out.WriteString("p")
					continue
				}
				if st.State.Terminal() {
					fmt.Fprint(&out, st.State.String()[:1])
					break
				}
			}
			for {
				errs, err := p.a.Release(ctx, []sdk.HandleID{h})
				require.NoError(t, err)
				if errs[0] == nil {
					break
				}
				out.WriteString("r")
			}
		}
		return out.String()
	}
	first := run("42")
	require.Equal(t, first, run("42"))
	require.NotEqual(t, first, run("43"))
	require.Contains(t, first, "F")
	require.Contains(t, first, "D")
	require.Contains(t, first, "p")
	require.Contains(t, first, "r")
}

// TestFaultPostFail: post-fail refuses the selected item with its code and
// posts nothing; the other items of the call are posted, and the refused
// item counts for post= numbering.
func TestFaultPostFail(t *testing.T) {
	p := newPair(t, 4096, map[string]string{"fault": "post-fail,post=2,code=REMOTE_DISCONNECT;post-fail,post=3"}, nil)
	spec := p.whole(sdk.OpWrite, []byte("note"))
	res, err := p.a.Post(ctx, []sdk.PostSpec{spec, spec, spec, spec})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	require.ErrorIs(t, res[1].Err, sdk.ErrRemoteDisconnect)
	require.Contains(t, res[1].Err.Error(), "post-fail")
	require.ErrorIs(t, res[2].Err, sdk.ErrBackend, "code defaults to BACKEND")
	require.NoError(t, res[3].Err)
	require.Zero(t, res[1].ID)
	require.Zero(t, res[2].ID)
	r, err := p.a.Resources(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(2), r.Handles, "the refused items hold nothing")
	for _, i := range []int{0, 3} {
		require.Equal(t, sdk.StateDone, terminal(t, p.a, res[i].ID).State)
	}
	release(t, p.a, res[0].ID, res[3].ID)
	require.Len(t, drainNotes(t, p.b, 2), 2, "only the posted items notify")
}

// TestFaultUnloadAndReleaseDlistFail: unload-fail and release-dlist-fail
// fail count items with BACKEND, changing nothing, then let them through;
// items that are refused anyway (BUSY) do not spend the count.
func TestFaultUnloadAndReleaseDlistFail(t *testing.T) {
	p := newPair(t, 4096, map[string]string{"fault": "unload-fail,count=2;release-dlist-fail,count=2,peer=b"}, nil)
	held := sdk.Resources{Regions: 1, Peers: 1, Dlists: 2}
	resources := func() sdk.Resources {
		r, err := p.a.Resources(ctx)
		require.NoError(t, err)
		return r
	}

	errs, err := p.a.UnloadPeers(ctx, []sdk.PeerID{p.peer})
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], sdk.ErrBusy, "the dlists still reference the peer")

	// The local dlist is not selected by peer=b.
	errs, err = p.a.ReleaseDescriptors(ctx, []sdk.DlistID{p.local})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	held.Dlists--
	for i := 0; i < 2; i++ {
		errs, err = p.a.ReleaseDescriptors(ctx, []sdk.DlistID{p.remote})
		require.NoError(t, err)
		require.ErrorIs(t, errs[0], sdk.ErrBackend, "attempt %d", i)
		require.Contains(t, errs[0].Error(), "release-dlist-fail")
		require.Equal(t, held, resources(), "a failed release changes nothing")
	}
	// The dlist is still usable.
	local := prepare(t, p.a, 0, sdk.Descriptor{Region: p.aRegion, Length: 4096})
	h := postOne(t, p.a, sdk.PostSpec{Op: sdk.OpWrite, Local: local, LocalIndices: []uint32{0}, Remote: p.remote, RemoteIndices: []uint32{0}})
	require.Equal(t, sdk.StateDone, terminal(t, p.a, h).State)
	release(t, p.a, h)
	errs, err = p.a.ReleaseDescriptors(ctx, []sdk.DlistID{p.remote, local})
	require.NoError(t, err)
	require.NoError(t, errs[0], "count=2 spent")
	require.NoError(t, errs[1])

	errs, err = p.a.UnloadPeers(ctx, []sdk.PeerID{p.peer, p.peer})
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], sdk.ErrBackend)
	require.ErrorIs(t, errs[1], sdk.ErrBackend)
	require.Contains(t, errs[0].Error(), "unload-fail")
	require.Equal(t, uint64(1), resources().Peers, "a failed unload changes nothing")
	errs, err = p.a.UnloadPeers(ctx, []sdk.PeerID{p.peer})
	require.NoError(t, err)
	require.NoError(t, errs[0], "count=2 spent")
	require.Zero(t, resources().Peers)
}

// TestFaultLog: fault_log gets one line per firing, naming the kind, and
// nothing for a rule that did not fire; a crash is logged too.
func TestFaultLog(t *testing.T) {
	log := filepath.Join(t.TempDir(), "faults.log")
	p := newPair(t, 4096, map[string]string{"fault": "post-fail,post=2;fail,post=3;stall,post=9;crash,at=poll,n=1", "fault_log": log}, nil)
	spec := p.whole(sdk.OpWrite, nil)
	res, err := p.a.Post(ctx, []sdk.PostSpec{spec, spec, spec})
	require.NoError(t, err)
	require.Equal(t, "post-fail\nfail\n", string(readFile(t, log)), "post 2 refused, post 3 failed, post 9 never came")
	_, err = p.a.Poll(ctx, []sdk.HandleID{res[0].ID})
	require.ErrorIs(t, err, sdk.ErrPluginShutdown)
	require.Equal(t, "post-fail\nfail\ncrash\n", string(readFile(t, log)))
}
