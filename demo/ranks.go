package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	enginev1 "github.com/custody-dev/custody/api/engine/v1"
	"github.com/custody-dev/custody/client"
	"github.com/custody-dev/custody/internal/cluster"
	"github.com/custody-dev/custody/sdk/plugin/agent"
)

// ranksLeaseTTL is each rank's membership lease: short, so that the rank
// killed mid-request is found lost within the run.
const ranksLeaseTTL = 2 * time.Second

// RunRanks runs the demo over ranks: a prefill engine and a decode engine
// of two ranks each, one `custody serve` process per rank with its own fake
// transport process, agreeing through an etcd embedded in the prefill's
// rank 0. Each decode rank pulls its share of a request from both prefill
// ranks (heterogeneous TP). Rank-level faults: decode rank 1 fails some
// transfers while rank 0 succeeds; decode rank 0 stalls one until the hold
// cap; decode rank 1 is killed mid-request at the end; a third engine
// whose rank 1 has another block size must be refused at startup; and on a
// fourth engine, rank 0 holds a push receive whose producer never writes,
// which nothing can prove stopped (its fence reaches only the transfers it
// initiated): the block is quarantined there, and the pool is poisoned on
// both ranks. At the end every live host must hold nothing (the leak
// audit) and stop cleanly.
func RunRanks(ctx context.Context, o Options) (*RanksSummary, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if o.Transport != "fake" {
		return nil, errors.New("demo --ranks: only the fake transport injects the rank faults")
	}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp(agent.Dir(), "custody-ranks-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	etcd, err := cluster.NewEtcd("pre", filepath.Join(dir, "etcd"))
	if err != nil {
		return nil, err
	}
	s := &RanksSummary{Requests: o.Requests, Poisoned: map[string][]string{}}
	const blocksPer = 2 // blocks each decode rank reads from each prefill rank
	spec := func(engine string, rank int, blocks, blockSize int, faults string) cluster.Spec {
		p := map[string]string{"seed": fmt.Sprint(o.Seed), "dir": dir}
		if faults != "" {
			p["fault"] = faults
		}
		return cluster.Spec{Name: fmt.Sprintf("%s-%d", engine, rank), Dir: dir, Custody: o.Custody, Transport: "fake", Params: p,
			Cap: time.Second, Policy: "fence", Blocks: blocks, BlockSize: blockSize, LogLevel: "warn",
			Group: etcd.Group(engine, rank, 2, ranksLeaseTTL)}
	}
	var all []*cluster.Host
	defer func() {
		for i := len(all) - 1; i >= 0; i-- {
			if all[i] != nil {
				_ = all[i].Stop()
			}
		}
	}()
	started := func(hs []*cluster.Host, err error) error {
		all = append(all, hs...)
		return err
	}
	preBlocks := o.Requests*2*blocksPer + 8 // blocks go back to the engine and are not reused here
	if err := started(cluster.StartEngine(ctx, spec("pre", 0, preBlocks, o.BlockSize, ""), spec("pre", 1, preBlocks, o.BlockSize, ""))); err != nil {
		return s, fmt.Errorf("prefill engine: %w", err)
	}
	decBlocks := o.Requests*2*blocksPer + 8
	stallAt, failEvery := 3, 7
	dfaults := []string{fmt.Sprintf("stall,post=%d", stallAt), fmt.Sprintf("fail,after=0,post=%d", failEvery)}
	s.Faults = append(s.Faults, fmt.Sprintf("dec-0: post %d stalls until the hold cap (1s)", stallAt), fmt.Sprintf("dec-1: post %d fails while dec-0 succeeds", failEvery))
	dec, err := cluster.StartEngine(ctx, spec("dec", 0, decBlocks, o.BlockSize, dfaults[0]), spec("dec", 1, decBlocks, o.BlockSize, dfaults[1]))
	if err := started(dec, err); err != nil {
		return s, fmt.Errorf("decode engine: %w", err)
	}
	pre := all[:2]
	for _, d := range dec {
		if err := d.Client.ConnectPeer(ctx, "prefill", client.RemoteRank{Address: "engine:pre", Pool: "kv"}); err != nil {
			return s, fmt.Errorf("%s: connect prefill by name: %w", d.Name, err)
		}
	}

	// A rank with another block size is refused, on every rank.
	bad, _ := cluster.StartEngine(ctx, spec("bad", 0, 8, o.BlockSize, ""), spec("bad", 1, 8, 2*o.BlockSize, ""))
	if bad[0] == nil && bad[1] == nil {
		s.Refused = "both ranks exited (see bad-0.log, bad-1.log)"
		if raw, err := os.ReadFile(dir + "/bad-0.log"); err == nil && bytes.Contains(raw, []byte(`block_size`)) {
			s.Refused = "both ranks exited; rank 0 logs: " + firstLine(raw, "block_size")
		}
	}

	start := time.Now()
	killAt := o.Requests - 1
	for i := range o.Requests {
		id := fmt.Sprintf("req-%04d", i)
		if err := runRankRequest(ctx, s, o, pre, dec, id, i, blocksPer, i == killAt); err != nil {
			return s, err
		}
	}
	s.Elapsed = time.Since(start)

	// A block no rank can prove safe poisons its pool on every rank.
	pspec := func(rank int) cluster.Spec {
		sp := spec("psn", rank, 8, o.BlockSize, "")
		sp.Params["fence"] = "initiated"
		return sp
	}
	psn, err := cluster.StartEngine(ctx, pspec(0), pspec(1))
	if err := started(psn, err); err != nil {
		return s, fmt.Errorf("poison engine: %w", err)
	}
	if err := runPoison(ctx, s, psn); err != nil {
		return s, err
	}

	// The leak audit: once every live host has reported what it was
	// given, none holds anything; then each stops cleanly.
	live := []*cluster.Host{pre[0], pre[1], dec[0], psn[0], psn[1]}
	for _, h := range live {
		st, err := drained(ctx, h)
		if err != nil {
			return s, err
		}
		s.Poisoned[h.Name] = st.GetPoisonedPools()
		if n := st.GetRequests() + st.GetInFlight() + st.GetRetained() + st.GetRetired() + st.GetJournal() + st.GetNativeHandles() + st.GetGroupHeld(); n > 0 {
			s.Leaks = append(s.Leaks, fmt.Sprintf("%s: %d requests, %d handles (%d retained), %d retired peers, %d journal entries, %d native handles, %d requests held for the other ranks",
				h.Name, st.GetRequests(), st.GetInFlight(), st.GetRetained(), st.GetRetired(), st.GetJournal(), st.GetNativeHandles(), st.GetGroupHeld()))
		}
	}
	// Stopped in reverse order of start: the rank running etcd last.
	for i := len(live) - 1; i >= 0; i-- {
		if err := live[i].Stop(); err != nil {
			s.Leaks = append(s.Leaks, err.Error())
		}
	}
	return s, nil
}

// drainWait bounds the wait for a host to report everything it was given:
// a request of the killed rank ends on the prefill ranks only when its
// lease (5 s) and the hold cap (1 s) have passed.
const drainWait = 30 * time.Second

// drained waits until h holds no request, handle or held report, or
// drainWait passed, and returns its last Status. It reads the reports it
// has not handed out yet, as an engine does each step.
func drained(ctx context.Context, h *cluster.Host) (*enginev1.StatusResponse, error) {
	deadline := time.Now().Add(drainWait)
	for {
		if _, err := h.Client.GetFinished(ctx); err != nil {
			return nil, fmt.Errorf("%s: finished: %w", h.Name, err)
		}
		st, err := h.Client.Status(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: status: %w", h.Name, err)
		}
		if st.GetRequests()+st.GetInFlight()+st.GetGroupHeld() == 0 || time.Now().After(deadline) {
			return st, nil
		}
		time.Sleep(10 * time.Millisecond) // pacing between polls, as an engine step does
	}
}

func firstLine(raw []byte, want string) string {
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.Contains(l, want) {
			if len(l) > 400 {
				l = l[:400] + "…"
			}
			return l
		}
	}
	return ""
}
