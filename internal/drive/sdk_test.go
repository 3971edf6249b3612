package drive

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/plugins/fake"
	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin/agent"
)

// batches counts the Post calls that carry more than one transfer: the
// rate phase posts whole batches, the latency phase one transfer at a time.
type batches struct {
	sdk.Transport
	n *atomic.Int32
}

func (b batches) Post(ctx context.Context, posts []sdk.PostSpec) ([]sdk.PostResult, error) {
	if len(posts) > 1 {
		b.n.Add(1)
	}
	return b.Transport.Post(ctx, posts)
}

// MeasureSDKLatency measures the latency alone; MeasureSDK the rate too.
func TestMeasureSDKLatencyRunsNoRate(t *testing.T) {
	params := map[string]string{"dir": t.TempDir(), "fence": "initiated"}
	for _, tc := range []struct {
		name    string
		measure func(context.Context, agent.Start, map[string]string, time.Duration) (SDKResult, error)
		rate    bool
	}{{"latency", MeasureSDKLatency, false}, {"both", MeasureSDK, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int32
			start := func(context.Context) (sdk.Transport, func(), error) {
				return batches{Transport: fake.New(), n: &n}, func() {}, nil
			}
			res, err := tc.measure(t.Context(), start, params, 20*time.Millisecond)
			require.NoError(t, err)
			assert.Positive(t, res.P50)
			assert.Equal(t, tc.rate, n.Load() > 0, "batches posted: %d", n.Load())
			assert.Equal(t, tc.rate, res.Rate > 0, "rate %v", res.Rate)
		})
	}
}
