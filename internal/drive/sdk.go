package drive

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin/agent"
)

// SDKSize is the size of one transfer of MeasureSDK; SDKDepth how many it
// keeps in flight for the completion rate.
const (
	SDKSize  = 4 << 10
	SDKDepth = 256
)

// Latency samples: the first sdkWarmup transfers warm up, then at least
// sdkSamples are measured.
const (
	sdkWarmup  = 100
	sdkSamples = 1000
)

// SDKResult is what MeasureSDK measured: Post to DONE of one transfer at a
// time (median, 99th percentile), and completions per second with SDKDepth
// in flight.
type SDKResult struct {
	P50, P99 time.Duration
	Rate     float64
}

// MeasureSDK starts two agents A and B with start, measures A WRITEing
// SDKSize descriptors into B (latency, then rate), and ends them.
func MeasureSDK(ctx context.Context, start agent.Start, params map[string]string, minTime time.Duration) (SDKResult, error) {
	return measureSDK(ctx, start, params, minTime, true)
}

// MeasureSDKLatency is MeasureSDK without the rate (Rate stays 0).
func MeasureSDKLatency(ctx context.Context, start agent.Start, params map[string]string, minTime time.Duration) (SDKResult, error) {
	return measureSDK(ctx, start, params, minTime, false)
}

func measureSDK(ctx context.Context, start agent.Start, params map[string]string, minTime time.Duration, withRate bool) (res SDKResult, err error) {
	p, err := agent.NewPair(ctx, start, "sdk-bench", params, agent.Dir(), SDKDepth*SDKSize)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, p.Stop()) }()
	a, b := p.A, p.B
	lists, err := Prepare(ctx, a, a.Region.Blocks(SDKDepth, SDKSize), b.Region.Blocks(SDKDepth, SDKSize))
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, lists.Release(ctx, a)) }()
	specs := lists.Singles(sdk.OpWrite, SDKDepth)
	lat, err := Latencies(ctx, a.Transport, specs, sdkWarmup, sdkSamples, minTime, Spin)
	if err != nil {
		return res, err
	}
	slices.Sort(lat)
	res.P50, res.P99 = lat[len(lat)/2], lat[len(lat)*99/100]
	if !withRate {
		return res, nil
	}
	res.Rate, err = rate(ctx, a.Transport, specs, minTime)
	return res, err
}
