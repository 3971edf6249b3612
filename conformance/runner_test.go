package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExecuteOne holds the CLI's runner to package testing's rules: Fatalf
// and Skipf end the check, Errorf does not, a panic fails it, and every
// cleanup runs, last in first out, after the context is canceled.
func TestExecuteOne(t *testing.T) {
	cfg := Config{CheckTimeout: time.Minute}
	c := check{name: "group/name", doc: "doc"}
	for _, tc := range []struct {
		name    string
		fn      func(T, *[]string)
		status  Status
		message string
		trace   []string
	}{
		{"pass", func(t T, tr *[]string) { *tr = append(*tr, "ran") }, StatusPass, "", []string{"ran"}},
		{"errorf goes on", func(t T, tr *[]string) {
			t.Errorf("first %d", 1)
			t.Errorf("second")
			*tr = append(*tr, "after")
		}, StatusFail, "first 1", []string{"after"}},
		{"fatalf stops", func(t T, tr *[]string) {
			t.Fatalf("stop here")
			*tr = append(*tr, "after")
		}, StatusFail, "stop here", nil},
		{"failnow stops", func(t T, tr *[]string) {
			t.FailNow()
			*tr = append(*tr, "after")
		}, StatusFail, "FailNow called", nil},
		{"skipf stops", func(t T, tr *[]string) {
			t.Skipf("not claimed: %s", "x")
			*tr = append(*tr, "after")
		}, StatusSkip, "not claimed: x", nil},
		{"skip after failure stays failed", func(t T, tr *[]string) {
			t.Errorf("broken")
			t.Skipf("skip")
		}, StatusFail, "broken", nil},
		{"panic fails", func(t T, tr *[]string) { panic("boom") }, StatusFail, "panic: boom", nil},
		{"cleanups run lifo after the context ends, past a fatal cleanup", func(t T, tr *[]string) {
			ctx := t.Context()
			t.Cleanup(func() { *tr = append(*tr, "c1", errString(ctx.Err())) })
			t.Cleanup(func() { *tr = append(*tr, "c2"); t.Fatalf("cleanup failed") })
			t.Cleanup(func() { *tr = append(*tr, "c3") })
			*tr = append(*tr, "body", errString(ctx.Err()))
		}, StatusFail, "cleanup failed", []string{"body", "", "c3", "c2", "c1", context.Canceled.Error()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var trace []string
			r := executeOne(t.Context(), c, cfg, func(ct T) { tc.fn(ct, &trace) })
			assert.Equal(t, tc.status, r.Status)
			assert.Contains(t, r.Message, tc.message)
			if tc.message == "" {
				assert.Empty(t, r.Message)
			}
			assert.Equal(t, tc.trace, trace)
			assert.Equal(t, "group", r.Group)
			assert.Equal(t, "group/name", r.Name)
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestExecuteOneAbandonsAHungCheck: a check that ignores its context and
// never ends is reported failed instead of hanging the run.
func TestExecuteOneAbandonsAHungCheck(t *testing.T) {
	release := make(chan struct{})
	ended := make(chan struct{})
	r := executeOne(t.Context(), check{name: "g/hung"}, Config{CheckTimeout: 10 * time.Millisecond}, func(T) {
		defer close(ended)
		<-release
	})
	close(release)
	<-ended
	assert.Equal(t, StatusFail, r.Status)
	assert.Contains(t, r.Message, "did not finish")
}

// TestConfigDefaults: a Config without a factory or with a bad directory
// is refused with the field named.
func TestConfigDefaults(t *testing.T) {
	_, err := Config{}.withDefaults()
	require.ErrorContains(t, err, "Config.New")
	_, err = Config{New: func(context.Context) (Agent, error) { return Agent{}, errors.New("x") }, Dir: "/no/such/dir"}.withDefaults()
	require.ErrorContains(t, err, "Config.Dir")
	cfg, err := Config{New: func(context.Context) (Agent, error) { return Agent{}, errors.New("x") }}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, defaultCheckTimeout, cfg.CheckTimeout)
	assert.NotEmpty(t, cfg.Dir)
	_, err = Execute(t.Context(), cfg)
	require.ErrorContains(t, err, "describe the transport")
}
