package conformance_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/conformance"
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
