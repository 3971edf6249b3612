package conformance_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/sdk"
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
	for _, tc := range []struct {
		mode   string
		check  string
		plugin bool // out of process: the check needs a killable agent
	}{
		{"describe-inconsistent", "contract/describe", false},
		{"poll-error-with-state", "contract/poll-unknown", false},
		{"release-unknown-ok", "contract/release-twice", false},
		{"deregister-busy-ok", "contract/busy-in-use", false},
		{"garbage-metadata-ok", "contract/bad-arguments", false},
		{"resources-leak", "contract/close-and-teardown", false},
		{"post-waits", "data/post-never-waits", false},
		{"cancel-frees", "cancel/frees-nothing", false},
		{"canceled-early", "cancel/as-described", false},
		{"notify-twice", "notifications/exactly-once-in-order", false},
		{"limit-unenforced", "limits/honoured", false},
		{"events-twice", "events/terminal-once", false},
		{"disconnect-as-backend", "peer-loss/bounded", true},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			var inner conformance.Factory
			if tc.plugin {
				if testing.Short() {
					t.Skip("launches plugin processes")
				}
				inner = conformance.PluginFactory(fakePlugin(t), sdk.LaunchOptions{})
			}
			for _, mode := range []string{"", tc.mode} {
				rep, err := conformance.Execute(t.Context(), conformance.Config{
					New:   brokenFactory(mode, inner),
					Match: func(name string) bool { return name == tc.check },
				})
				require.NoError(t, err)
				require.Len(t, rep.Results, 1)
				r := rep.Results[0]
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
