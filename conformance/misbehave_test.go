package conformance_test

import (
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/sdk/plugin"
)

// TestSuiteCatchesMisbehaviour proves the suite can fail: the fake run in
// each misbehaving mode fails the check written for that mode.
func TestSuiteCatchesMisbehaviour(t *testing.T) {
	for _, tc := range []struct {
		mode  string
		check string
	}{
		{"release-running", "contract/release-running-busy"},
		{"reuse-ids", "contract/ids-never-reused"},
		{"early-done", "data/sizes"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			rep, err := conformance.Execute(t.Context(), conformance.Config{
				New:    inProcess,
				Params: map[string]string{"misbehave": tc.mode},
				Match:  func(name string) bool { return name == tc.check },
			})
			require.NoError(t, err)
			require.Len(t, rep.Results, 1)
			r := rep.Results[0]
			assert.Equal(t, conformance.StatusFail, r.Status, "check %s passed against misbehave=%s: %s", tc.check, tc.mode, r.Message)
			t.Logf("%s caught misbehave=%s: %s", tc.check, tc.mode, r.Message)
			assert.True(t, rep.Failed())
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
		{"poll-error-with-state", "contract/poll-unknown", false, nil, nil},
		{"release-unknown-ok", "contract/release-twice", false, nil, nil},
		{"deregister-busy-ok", "contract/busy-in-use", false, nil, nil},
		{"garbage-metadata-ok", "contract/bad-arguments", false, nil, nil},
		{"resources-leak", "contract/close-and-teardown", false, nil, nil},
		{"post-waits", "data/post-never-waits", false, nil, nil},
		{"cancel-frees", "cancel/frees-nothing", false, nil, nil},
		{"canceled-early", "cancel/as-described", false, nil, nil},
		{"notify-twice", "notifications/exactly-once-in-order", false, nil, nil},
		{"limit-unenforced", "limits/honoured", false, nil, nil},
		{"events-twice", "events/terminal-once", false, nil, nil},
		{"disconnect-as-backend", "peer-loss/bounded", true, nil, nil},
		{"disconnect-as-done", "peer-loss/bounded", true, nil, nil},
		{"fence-incoming-lie", "fence/incoming", true, slow, map[string]string{"fence": "initiated"}},
		{"release-waits", "contract/release-running-busy", false, nil, nil},
		{"busy-needs-handle", "contract/busy-in-use", false, nil, nil},
		{"notify-canceled", "notifications/never-unless-done", false, nil, nil},
		{"ids-across-kinds", "contract/ids-never-reused", false, nil, nil},
		{"events-over-max", "events/terminal-once", false, nil, nil},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			var inner conformance.Factory
			if tc.plugin {
				if testing.Short() {
					t.Skip("launches plugin processes")
				}
				inner = conformance.PluginFactory(fakePlugin(t), plugin.LaunchOptions{})
			}
			for _, mode := range []string{"", tc.mode} {
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
