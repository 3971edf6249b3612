package conformance_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/plugins/fake"
	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
)

// TestProcessDeathIsReportedToAuthors: a transport process that exits
// during a check (the fake plugin's crash fault: exit status 3 at its
// first Post) fails the check with a message that says the process died
// and how, without the host's advice PLUGIN_SHUTDOWN carries, and the
// teardown does not add a cascade of failed calls to the dead process.
func TestProcessDeathIsReportedToAuthors(t *testing.T) {
	if testing.Short() {
		t.Skip("launches plugin processes")
	}
	rep, err := conformance.Execute(t.Context(), conformance.Config{
		New:    conformance.PluginFactory(fakePlugin(t), plugin.LaunchOptions{}),
		Params: map[string]string{"fault": "crash,at=post,n=1"},
		Match:  func(name string) bool { return name == "contract/release-twice" },
	})
	require.NoError(t, err)
	require.Len(t, rep.Results, 1)
	r := rep.Results[0]
	require.Equal(t, conformance.StatusFail, r.Status)
	t.Logf("message: %s", r.Message)
	for _, l := range r.Log {
		t.Logf("log: %s", l)
	}
	assert.Contains(t, r.Message, "the transport process died: exit status 3", "the failure says the process died, and how")
	assert.NotContains(t, r.Message, "new epoch", "advice meant for the host")
	deaths := 0
	for _, l := range r.Log {
		assert.NotContains(t, l, "PLUGIN_SHUTDOWN", "a line of the log still shows the host's error")
		if strings.HasPrefix(l, "teardown:") {
			t.Errorf("teardown noise after the process died: %s", l)
		}
		if strings.Contains(l, "died") {
			deaths++
		}
	}
	assert.LessOrEqual(t, deaths, 2, "the death is said once by the failed call and at most once by the teardown")
}

// liar wraps an in-process fake whose LoadPeers answers OK for metadata
// the fake refused, with a made-up peer it then counts in Resources: a
// bad call that was not refused and changed Resources.
type liar struct {
	transport
	mu   sync.Mutex
	lies map[sdk.PeerID]bool
}

func (l *liar) LoadPeers(ctx context.Context, peers []sdk.PeerSpec) ([]sdk.PeerResult, error) {
	res, err := l.transport.LoadPeers(ctx, peers)
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range res {
		if errors.Is(res[i].Err, sdk.ErrInvalidArgument) && len(peers[i].Metadata) > 0 {
			res[i] = sdk.PeerResult{ID: sdk.PeerID(lieBase + len(l.lies))}
			l.lies[res[i].ID] = true
		}
	}
	return res, err
}

func (l *liar) UnloadPeers(ctx context.Context, ids []sdk.PeerID) ([]error, error) {
	l.mu.Lock()
	var real []sdk.PeerID
	for _, id := range ids {
		if !l.lies[id] {
			real = append(real, id)
		}
	}
	l.mu.Unlock()
	errs, err := l.transport.UnloadPeers(ctx, real)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]error, len(ids))
	for i, id := range ids {
		if l.lies[id] {
			delete(l.lies, id)
			continue
		}
		out[i], errs = errs[0], errs[1:]
	}
	return out, nil
}

func (l *liar) Resources(ctx context.Context) (sdk.Resources, error) {
	r, err := l.transport.Resources(ctx)
	l.mu.Lock()
	r.Peers += uint64(len(l.lies))
	l.mu.Unlock()
	return r, err
}

// TestChangedResourcesNamesTheAnswer: when a call the suite expected to be
// refused answered OK and changed Resources, the failure says what it
// answered; it never claims the call was refused.
func TestChangedResourcesNamesTheAnswer(t *testing.T) {
	rep, err := conformance.Execute(t.Context(), conformance.Config{
		New: func(context.Context) (conformance.Agent, error) {
			return conformance.Agent{Transport: &liar{transport: fake.New(), lies: map[sdk.PeerID]bool{}}}, nil
		},
		Match: func(name string) bool { return name == "contract/bad-arguments" },
	})
	require.NoError(t, err)
	require.Len(t, rep.Results, 1)
	r := rep.Results[0]
	require.Equal(t, conformance.StatusFail, r.Status, "a LoadPeers that accepts garbage passed")
	found := false
	for _, l := range r.Log {
		if strings.Contains(l, "LoadPeers(garbage metadata)") && strings.Contains(l, "Resources") {
			t.Logf("%s", l)
			found = true
			assert.Contains(t, l, "answered OK, not INVALID_ARGUMENT, and changed Resources")
			assert.NotContains(t, l, "was refused")
		}
	}
	assert.True(t, found, "no failure says that LoadPeers(garbage metadata) changed Resources: %v", r.Log)
}
