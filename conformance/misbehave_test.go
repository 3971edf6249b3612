package conformance_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/plugins/fake"
	"github.com/custody-dev/custody/sdk/plugin"
)

// TestSuiteCatchesMisbehaviour proves the suite can fail: the fake run in
// each misbehaving mode fails the check written for that mode, with a
// message that names the rule broken. A mode with :0.1 breaks its rule
// only one time in ten: the check's repetitions still catch it (the check
// misses it with probability 0.9^repeat or less, 2.7e-5 at the default).
func TestSuiteCatchesMisbehaviour(t *testing.T) {
	// slow makes a fake WRITE run long enough to kill its target under it.
	slow := map[string]string{"chunk": "16384", "chunk_delay": "50us"}
	for _, tc := range []struct {
		mode, check string
		says        string            // the rule, as the failure names it
		plugin      bool              // out of process (the check kills an agent, or answers come through the rings)
		grpc        bool              // out of process without the rings
		params      map[string]string // more params
		within      time.Duration     // the check must fail this soon (0: no bound)
		early       bool              // the mode is given at New (fake.WithMisbehave), not to Open
	}{
		{mode: "release-running", check: "contract/release-running-busy", says: "a running handle is BUSY"},
		{mode: "release-running:0.1", check: "contract/release-running-busy", says: "a running handle is BUSY"},
		{mode: "reuse-ids", check: "contract/ids-never-reused", says: "ids must never be reused"},
		{mode: "reuse-ids:0.1", check: "contract/ids-never-reused", says: "ids must never be reused"},
		{mode: "early-done", check: "data/sizes", says: "as soon as DONE was reported"},
		{mode: "early-done:0.1", check: "data/done-means-landed", says: "the instant DONE was first reported"},
		{mode: "early-done:0.1", check: "notifications/with-post", says: "the moment its notification was drained"},
		{mode: "terminal-flip", check: "contract/terminal-stays", says: "a terminal state never changes"},
		{mode: "terminal-flip:0.1", check: "contract/terminal-stays", says: "a terminal state never changes"},
		{mode: "terminal-flip-next", check: "contract/terminal-stays", says: "a terminal state never changes"},
		{mode: "terminal-flip-next:0.1", check: "contract/terminal-stays", says: "a terminal state never changes"},
		{mode: "cancel-terminal", check: "cancel/terminal-unchanged", says: "Cancel of a terminal handle changes nothing"},
		{mode: "cancel-terminal:0.1", check: "cancel/terminal-unchanged", says: "Cancel of a terminal handle changes nothing"},
		// Out of process, the rings answer a terminal handle's Poll from
		// their record: the re-checks must reach the transport itself.
		{mode: "terminal-flip", check: "contract/terminal-stays", says: "a terminal state never changes", plugin: true},
		{mode: "terminal-flip", check: "contract/terminal-stays", says: "a terminal state never changes", plugin: true, grpc: true},
		{mode: "terminal-flip-next:0.1", check: "contract/terminal-stays", says: "a terminal state never changes", plugin: true},
		{mode: "terminal-flip-next:0.1", check: "contract/terminal-stays", says: "a terminal state never changes", plugin: true, grpc: true},
		{mode: "cancel-terminal", check: "cancel/terminal-unchanged", says: "Cancel of a terminal handle changes nothing", plugin: true},
		{mode: "cancel-terminal", check: "cancel/terminal-unchanged", says: "Cancel of a terminal handle changes nothing", plugin: true, grpc: true},
		{mode: "unpin-terminal", check: "contract/dlist-pinned-until-release", says: "a live handle pins its dlists until Release, terminal or not"},
		{mode: "unpin-terminal:0.1", check: "contract/dlist-pinned-until-release", says: "a live handle pins its dlists until Release, terminal or not"},
		{mode: "close-lax", check: "contract/close-busy-peer-dlist", says: "Close is refused while anything is held"},
		{mode: "close-lax:0.1", check: "contract/close-busy-peer-dlist", says: "Close is refused while anything is held"},
		{mode: "ungated", check: "contract/before-open-after-close", says: "any call but Describe after Close is refused"},
		{mode: "ungated", check: "contract/before-open-after-close", says: "any call but Describe before Open is refused", early: true},
		{mode: "open-lax", check: "contract/open-once", says: "Open with an unknown parameter"},
		{mode: "cancel-slow:0.1", check: "cancel/bound", says: "over Limits.CancelBoundMillis"},
		{mode: "cancel-lie", check: "cancel/as-described", says: "Cancel stops nothing"},
		{mode: "cancel-lie:0.1", check: "cancel/as-described", says: "Cancel stops nothing"},
		{mode: "drop-notification:0.1", check: "notifications/exactly-once-in-order", says: "a notification was lost", within: 30 * time.Second},
		{mode: "fence-lie", check: "fence/incoming", says: "FenceScope", plugin: true, params: slow},
		// At full speed the first transfers may all land before the kill:
		// the check grows them until the kill cuts some, never passing on
		// a round that cut nothing.
		{mode: "peer-loss-lie", check: "peer-loss/bounded", says: "still IN_PROGRESS", plugin: true},
		{mode: "peer-loss-lie:0.1", check: "peer-loss/bounded", says: "still IN_PROGRESS", plugin: true, params: slow},
	} {
		where := map[bool]string{true: " plugin"}[tc.plugin] + map[bool]string{true: " grpc"}[tc.grpc]
		t.Run(tc.mode+" "+tc.check+where+map[bool]string{true: " slow"}[tc.params != nil]+map[bool]string{true: " at New"}[tc.early], func(t *testing.T) {
			// Most of these wait on a bound (a cancel's, a peer loss's, a
			// lost notification's) more than they compute: side by side.
			t.Parallel()
			factory := conformance.Factory(inProcess)
			if tc.plugin {
				if testing.Short() {
					t.Skip("launches plugin processes")
				}
				factory = conformance.PluginFactory(fakePlugin(t), plugin.LaunchOptions{DisableRings: tc.grpc})
			}
			params := maps.Clone(tc.params)
			if params == nil {
				params = map[string]string{}
			}
			params["misbehave"] = tc.mode
			if tc.early {
				delete(params, "misbehave")
				opt, err := fake.WithMisbehave(tc.mode)
				require.NoError(t, err)
				factory = func(context.Context) (conformance.Agent, error) {
					return conformance.Agent{Transport: fake.New(opt)}, nil
				}
			}
			var r conformance.Result
			// A fence race needs the kill to land while bytes move: three
			// tries on a loaded machine. Every other mode is caught at once.
			for try := 0; try < 3; try++ {
				rep, err := conformance.Execute(t.Context(), conformance.Config{
					New:    factory,
					Params: params,
					Match:  func(name string) bool { return name == tc.check },
				})
				require.NoError(t, err)
				require.Len(t, rep.Results, 1)
				r = rep.Results[0]
				if r.Status == conformance.StatusFail || !tc.plugin {
					break
				}
			}
			require.Equal(t, conformance.StatusFail, r.Status, "check %s passed against misbehave=%s: %s", tc.check, tc.mode, r.Message)
			assert.Contains(t, r.Message, tc.says, "the failure of %s should name the rule misbehave=%s breaks", tc.check, tc.mode)
			if tc.within > 0 {
				assert.Less(t, r.Duration, tc.within, "the check should find the break without waiting out its settle bound")
			}
			t.Logf("%s caught misbehave=%s in %v: %s", tc.check, tc.mode, r.Duration.Round(time.Millisecond), r.Message)
		})
	}
}

// TestEachCheckCanFail proves the checks the fake's misbehave modes do not
// reach can fail too: each is run against a fake wrapped to break the rule
// it holds (broken), and must fail, while the same check against the
// unbroken wrapper passes.
func TestEachCheckCanFail(t *testing.T) {
	// slow makes a fake WRITE run long enough to kill its target under it.
	slow := map[string]string{"chunk": "16384", "chunk_delay": "50us"}
	for _, tc := range []struct {
		mode   string
		check  string
		plugin bool // out of process: the check needs a killable agent
		// params open both runs' agents; brokenParams are added to the
		// broken run's.
		params, brokenParams map[string]string
	}{
		{"describe-inconsistent", "contract/describe", false, nil, nil},
		{"describe-inconsistent:0.1", "contract/describe", false, nil, nil},
		{"poll-error-with-state", "contract/poll-unknown", false, nil, nil},
		{"release-unknown-ok", "contract/release-twice", false, nil, nil},
		{"deregister-busy-ok", "contract/busy-in-use", false, nil, nil},
		{"deregister-busy-ok:0.1", "contract/busy-in-use", false, nil, nil},
		{"garbage-metadata-ok", "contract/bad-arguments", false, nil, nil},
		{"resources-leak", "contract/close-and-teardown", false, nil, nil},
		{"resources-leak:0.1", "contract/close-and-teardown", false, nil, nil},
		{"post-waits", "data/post-never-waits", false, nil, nil},
		{"post-waits:0.8", "data/post-never-waits", false, nil, nil},
		{"cancel-frees", "cancel/frees-nothing", false, nil, nil},
		{"canceled-early", "cancel/as-described", false, nil, nil},
		{"notify-twice", "notifications/exactly-once-in-order", false, nil, nil},
		{"limit-unenforced", "limits/honoured", false, nil, nil},
		{"limit-unenforced:0.1", "limits/honoured", false, nil, nil},
		{"events-twice", "events/terminal-once", false, nil, nil},
		{"events-twice:0.1", "events/terminal-once", false, nil, nil},
		{"disconnect-as-backend", "peer-loss/bounded", true, nil, nil},
		{"disconnect-as-backend:0.1", "peer-loss/bounded", true, nil, nil},
		{"disconnect-as-done", "peer-loss/bounded", true, nil, nil},
		{"disconnect-as-done:0.1", "peer-loss/bounded", true, nil, nil},
		{"fence-incoming-lie", "fence/incoming", true, slow, map[string]string{"fence": "initiated"}},
		{"release-waits", "contract/release-running-busy", false, nil, nil},
		{"release-waits:0.1", "contract/release-running-busy", false, nil, nil},
		{"busy-needs-handle", "contract/busy-in-use", false, nil, nil},
		{"busy-needs-handle:0.1", "contract/busy-in-use", false, nil, nil},
		{"notify-canceled", "notifications/never-unless-done", false, nil, nil},
		{"ids-across-kinds", "contract/ids-never-reused", false, nil, nil},
		{"events-over-max", "events/terminal-once", false, nil, nil},
		{"events-over-max:0.1", "events/terminal-once", false, nil, nil},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			var inner conformance.Factory
			if tc.plugin {
				if testing.Short() {
					t.Skip("launches plugin processes")
				}
				inner = conformance.PluginFactory(fakePlugin(t), plugin.LaunchOptions{})
			}
			// The unbroken wrapper, and a rule broken every time, need no
			// more than a short repeat, which keeps CI short; a rule
			// broken one time in ten (NAME:0.1) gets the default, as a
			// transport author's run would.
			for _, mode := range []string{"", tc.mode} {
				repeat := 20
				if strings.Contains(mode, ":") {
					repeat = 0
				}
				params := maps.Clone(tc.params)
				if mode != "" && tc.brokenParams != nil {
					if params == nil {
						params = map[string]string{}
					}
					maps.Copy(params, tc.brokenParams)
				}
				// A broken transport need be caught once; timing-bound ones
				// (a fence race) get three tries on a loaded machine.
				var r conformance.Result
				for try := 0; try < 3; try++ {
					rep, err := conformance.Execute(t.Context(), conformance.Config{
						New:    brokenFactory(mode, inner),
						Params: params,
						Match:  func(name string) bool { return name == tc.check },
						Repeat: repeat,
					})
					require.NoError(t, err)
					require.Len(t, rep.Results, 1)
					r = rep.Results[0]
					if mode == "" || r.Status == conformance.StatusFail {
						break
					}
				}
				if mode == "" {
					assert.Equal(t, conformance.StatusPass, r.Status, "check %s against the unbroken wrapper: %s", tc.check, r.Message)
					continue
				}
				assert.Equal(t, conformance.StatusFail, r.Status, "check %s passed against a transport broken by %s", tc.check, tc.mode)
				t.Logf("%s caught %s: %s", tc.check, tc.mode, r.Message)
			}
		})
	}
}

// TestCheckTimeoutEndsTheCheck: Config.CheckTimeout bounds the check's own
// calls, not only the runner's patience: a transfer that never ends (the
// fake's stall fault) keeps the check polling within its 60s settle bound,
// yet once CheckTimeout passed its next Poll fails with the check's
// deadline, well before the runner would abandon it, and the teardown
// (with fresh contexts) still frees everything.
func TestCheckTimeoutEndsTheCheck(t *testing.T) {
	rep, err := conformance.Execute(t.Context(), conformance.Config{
		New:          inProcess,
		Params:       map[string]string{"fault": "stall"},
		CheckTimeout: 2 * time.Second,
		Match:        func(name string) bool { return name == "contract/release-twice" },
	})
	require.NoError(t, err)
	require.Len(t, rep.Results, 1)
	r := rep.Results[0]
	require.Equal(t, conformance.StatusFail, r.Status, "a check whose transfer never ends passed: %s", r.Message)
	assert.Contains(t, r.Message, "Poll(", "the check should end on the Poll its deadline cut short")
	assert.NotContains(t, r.Message, "did not finish within", "the runner had to abandon the check: CheckTimeout did not bound its calls")
	for _, l := range r.Log {
		assert.NotContains(t, l, "teardown:", "the teardown should free everything once the check ended")
	}
}

// TestRepeatMustBePositive: a negative Config.Repeat is refused, naming
// the field, before anything runs.
func TestRepeatMustBePositive(t *testing.T) {
	_, err := conformance.Execute(t.Context(), conformance.Config{New: inProcess, Repeat: -1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Config.Repeat -1")
}

// TestBeforeOpenOutOfProcess: the plugin binary breaks the before-Open
// rule when told so at its start (fake.MisbehaveEnv), and the gate check
// catches it out of process as well. Not parallel: the variable is the
// test process's, inherited by every plugin it launches meanwhile.
func TestBeforeOpenOutOfProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("launches plugin processes")
	}
	t.Setenv(fake.MisbehaveEnv, "ungated")
	rep, err := conformance.Execute(t.Context(), conformance.Config{
		New:   conformance.PluginFactory(fakePlugin(t), plugin.LaunchOptions{}),
		Match: func(name string) bool { return name == "contract/before-open-after-close" },
	})
	require.NoError(t, err)
	require.Len(t, rep.Results, 1)
	r := rep.Results[0]
	require.Equal(t, conformance.StatusFail, r.Status, "the gate check passed against a plugin ungated from its start: %s", r.Message)
	assert.Contains(t, r.Message, "before Open is refused")
}
