package drive

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
)

// SDKSize is the size of one transfer of MeasureSDK; SDKDepth how many it
// keeps in flight for the completion rate.
const (
	SDKSize  = 4 << 10
	SDKDepth = 256
)

// Start returns a new agent of the transport and what ends it: in this
// process, or a plugin process through its boundary.
type Start func(ctx context.Context) (sdk.Transport, func(), error)

// SDKResult is what MeasureSDK measured: Post to DONE of one transfer at a
// time (median, 99th percentile), and completions per second with SDKDepth
// in flight.
type SDKResult struct {
	P50, P99 time.Duration
	Rate     float64
}

// agent is one agent of a way and what it holds.
type agent struct {
	t      sdk.Transport
	end    func()
	path   string
	region sdk.RegionID
	peer   sdk.PeerID
}

// MeasureSDK starts two agents A and B with start, measures A WRITEing
// SDKSize descriptors into B (latency, then rate), and ends them.
func MeasureSDK(ctx context.Context, start Start, params map[string]string, minTime time.Duration) (SDKResult, error) {
	return measureSDK(ctx, start, params, minTime, true)
}

// MeasureSDKLatency is MeasureSDK without the rate (Rate stays 0).
func MeasureSDKLatency(ctx context.Context, start Start, params map[string]string, minTime time.Duration) (SDKResult, error) {
	return measureSDK(ctx, start, params, minTime, false)
}

func measureSDK(ctx context.Context, start Start, params map[string]string, minTime time.Duration, withRate bool) (res SDKResult, err error) {
	var ag [2]*agent
	defer func() {
		for _, a := range ag {
			if a != nil {
				err = errors.Join(err, a.stop())
			}
		}
	}()
	for i, name := range []string{"sdk-bench-a", "sdk-bench-b"} {
		a, err := startAgent(ctx, start, name, params)
		if a != nil {
			ag[i] = a
		}
		if err != nil {
			return res, err
		}
	}
	a, b := ag[0], ag[1]
	md, err := b.t.LocalMetadata(ctx)
	if err != nil {
		return res, fmt.Errorf("LocalMetadata: %w", err)
	}
	pr, err := One(a.t.LoadPeers(ctx, []sdk.PeerSpec{{Name: "sdk-bench-b", Metadata: md}}))
	if err = FirstErr(err, pr.Err); err != nil {
		return res, fmt.Errorf("LoadPeers: %w", err)
	}
	a.peer = pr.ID
	var ld, rd []sdk.Descriptor
	for i := range SDKDepth {
		off := uint64(i * SDKSize)
		ld = append(ld, sdk.Descriptor{Region: a.region, Offset: off, Length: SDKSize})
		rd = append(rd, sdk.Descriptor{Region: b.region, Offset: off, Length: SDKSize})
	}
	lists, err := a.t.PrepareDescriptors(ctx, []sdk.DlistSpec{{Descriptors: ld}, {Peer: a.peer, Descriptors: rd}})
	if err == nil {
		err = errors.Join(lists[0].Err, lists[1].Err)
	}
	if err != nil {
		return res, fmt.Errorf("PrepareDescriptors: %w", err)
	}
	defer func() {
		_, rerr := a.t.ReleaseDescriptors(ctx, []sdk.DlistID{lists[0].ID, lists[1].ID})
		err = errors.Join(err, rerr)
	}()
	specs := make([]sdk.PostSpec, SDKDepth)
	idx := make([]uint32, SDKDepth)
	for i := range specs {
		idx[i] = uint32(i)
		specs[i] = sdk.PostSpec{Op: sdk.OpWrite, Local: lists[0].ID, LocalIndices: idx[i : i+1], Remote: lists[1].ID, RemoteIndices: idx[i : i+1]}
	}
	if res.P50, res.P99, err = latency(ctx, a.t, specs, minTime); err != nil || !withRate {
		return res, err
	}
	res.Rate, err = rate(ctx, a.t, specs, minTime)
	return res, err
}

func startAgent(ctx context.Context, start Start, name string, params map[string]string) (*agent, error) {
	t, end, err := start(ctx)
	if err != nil {
		return nil, err
	}
	a := &agent{t: t, end: end}
	p := map[string]string{}
	for k, v := range params {
		p[k] = v
	}
	if err := t.Open(ctx, sdk.OpenRequest{Agent: name, Params: p}); err != nil {
		return a, fmt.Errorf("Open %s: %w", name, err)
	}
	f, err := os.CreateTemp(ShmDir(), "custody-bench-sdk-")
	if err != nil {
		return a, err
	}
	a.path = f.Name()
	if err := errors.Join(f.Truncate(SDKDepth*SDKSize), f.Close()); err != nil {
		return a, err
	}
	reg, err := One(t.RegisterMemory(ctx, []sdk.Region{{Path: a.path, Length: SDKDepth * SDKSize, Kind: sdk.MemoryHost}}))
	if err = FirstErr(err, reg.Err); err != nil {
		return a, fmt.Errorf("RegisterMemory %s: %w", name, err)
	}
	a.region = reg.ID
	return a, nil
}

// stop releases what the agent holds, closes and ends it.
func (a *agent) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	if a.peer != 0 {
		e, err := One(a.t.UnloadPeers(ctx, []sdk.PeerID{a.peer}))
		errs = append(errs, FirstErr(err, e))
	}
	if a.region != 0 {
		e, err := One(a.t.DeregisterMemory(ctx, []sdk.RegionID{a.region}))
		errs = append(errs, FirstErr(err, e))
	}
	errs = append(errs, a.t.Close(ctx))
	a.end()
	if a.path != "" {
		errs = append(errs, os.Remove(a.path))
	}
	return errors.Join(errs...)
}

// latency posts one transfer at a time and spins on Poll until it is
// DONE; it returns the median and 99th percentile of Post to DONE.
func latency(ctx context.Context, t sdk.Transport, specs []sdk.PostSpec, minTime time.Duration) (p50, p99 time.Duration, err error) {
	var lat []time.Duration
	start := time.Now()
	for i := 0; len(lat) < 1000 || time.Since(start) < minTime; i++ {
		t0 := time.Now()
		pr, err := One(t.Post(ctx, specs[i%len(specs):i%len(specs)+1]))
		if err = FirstErr(err, pr.Err); err != nil {
			return 0, 0, fmt.Errorf("Post: %w", err)
		}
		ids := []sdk.HandleID{pr.ID}
		for {
			st, err := One(t.Poll(ctx, ids))
			if err = FirstErr(err, st.Err); err != nil {
				return 0, 0, fmt.Errorf("Poll: %w", err)
			}
			if st.State == sdk.StateDone {
				break
			}
			if st.State.Terminal() {
				return 0, 0, fmt.Errorf("handle %d ended %v: %v", pr.ID, st.State, st.Reason)
			}
			runtime.Gosched()
		}
		d := time.Since(t0)
		if i >= 100 { // the first ones warm up
			lat = append(lat, d)
		}
		e, err := One(t.Release(ctx, ids))
		if err = FirstErr(err, e); err != nil {
			return 0, 0, fmt.Errorf("Release: %w", err)
		}
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100], nil
}

// rate keeps len(specs) transfers in flight and counts completions per
// second.
func rate(ctx context.Context, t sdk.Transport, specs []sdk.PostSpec, minTime time.Duration) (float64, error) {
	es, hasEvents := t.(sdk.EventSource)
	if p, ok := t.(*plugin.Plugin); ok {
		hasEvents = p.HasEvents()
	}
	waker, _ := t.(sdk.Waker)
	if hasEvents {
		// Events of the latency run are stale here.
		if _, err := es.Events(ctx, 0); err != nil {
			return 0, fmt.Errorf("Events: %w", err)
		}
	}
	slotOf := map[sdk.HandleID]int{}
	post := func(slots []int) error {
		batch := make([]sdk.PostSpec, len(slots))
		for i, s := range slots {
			batch[i] = specs[s]
		}
		res, err := t.Post(ctx, batch)
		if err != nil {
			return fmt.Errorf("Post: %w", err)
		}
		for i, r := range res {
			if r.Err != nil {
				return fmt.Errorf("Post: %w", r.Err)
			}
			slotOf[r.ID] = slots[i]
		}
		return nil
	}
	all := make([]int, len(specs))
	for i := range all {
		all[i] = i
	}
	if err := post(all); err != nil {
		return 0, err
	}
	done := 0
	var start time.Time
	for {
		var finished []sdk.HandleID
		if hasEvents {
			evs, err := es.Events(ctx, 0)
			if err != nil {
				return 0, fmt.Errorf("Events: %w", err)
			}
			for _, e := range evs {
				if _, ours := slotOf[e.Handle]; !ours {
					continue
				}
				if e.State == sdk.StateDone {
					finished = append(finished, e.Handle)
				} else if e.State.Terminal() {
					return 0, fmt.Errorf("handle %d ended %v: %v", e.Handle, e.State, e.Reason)
				}
			}
		} else {
			ids := make([]sdk.HandleID, 0, len(slotOf))
			for id := range slotOf {
				ids = append(ids, id)
			}
			sts, err := t.Poll(ctx, ids)
			if err != nil {
				return 0, fmt.Errorf("Poll: %w", err)
			}
			for i, st := range sts {
				if st.Err == nil && st.State == sdk.StateDone {
					finished = append(finished, ids[i])
				}
			}
		}
		if len(finished) == 0 {
			if waker != nil {
				select {
				case <-waker.Wake():
				case <-time.After(time.Millisecond):
				}
			} else {
				runtime.Gosched()
			}
			continue
		}
		errs, err := t.Release(ctx, finished)
		if err == nil {
			err = errors.Join(errs...)
		}
		if err != nil {
			return 0, fmt.Errorf("Release: %w", err)
		}
		slots := make([]int, len(finished))
		for i, id := range finished {
			slots[i] = slotOf[id]
			delete(slotOf, id)
		}
		if start.IsZero() {
			// The first completions end the warm-up.
			start = time.Now()
		} else {
			done += len(finished)
		}
		if !start.IsZero() && time.Since(start) >= minTime {
			r := float64(done) / time.Since(start).Seconds()
			return r, drain(ctx, t, slotOf)
		}
		if err := post(slots); err != nil {
			return 0, err
		}
	}
}

// drain waits for what is still in flight and releases it.
func drain(ctx context.Context, t sdk.Transport, slotOf map[sdk.HandleID]int) error {
	ids := make([]sdk.HandleID, 0, len(slotOf))
	for id := range slotOf {
		ids = append(ids, id)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(ids) > 0 {
		sts, err := t.Poll(ctx, ids)
		if err != nil {
			return err
		}
		var left, rel []sdk.HandleID
		for i, st := range sts {
			if st.Err == nil && st.State.Terminal() {
				rel = append(rel, ids[i])
			} else {
				left = append(left, ids[i])
			}
		}
		if len(rel) > 0 {
			if _, err := t.Release(ctx, rel); err != nil {
				return err
			}
		}
		ids = left
		if time.Now().After(deadline) {
			return fmt.Errorf("%d transfers still in flight after 30 s", len(ids))
		}
		runtime.Gosched()
	}
	return nil
}
