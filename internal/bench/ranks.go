package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/custody-dev/custody/internal/cluster"
	"github.com/custody-dev/custody/sdk/plugin/agent"
)

// ranksBenchRounds is how many times each mode is measured, interleaved
// (coordinated, independent, coordinated, ...); the median of each is kept.
const ranksBenchRounds = 5

// ranksSeqPulls is the sequential pulls measured per round, for latency.
const ranksSeqPulls = 100

// rankMode is one of the two rank sets measured and its engines.
type rankMode struct {
	name string
	set  *cluster.RankSet
	*engines
	etcd *clientv3.Client
}

// ranksRound is one measured round of one mode.
type ranksRound struct {
	rate    float64         // pulls per second at cfg.Concurrency
	seq     []time.Duration // sequential pull latencies
	conc    []time.Duration // latencies under cfg.Concurrency in flight
	elapsed time.Duration   // of the throughput run
	// writes counts, per "engine/rank", the etcd write transactions seen
	// during the throughput run; revs the etcd revisions it advanced.
	writes map[string]int
	revs   int64
	// cpu is the CPU time the four hosts and their transport processes
	// (the embedded etcd included) used during the throughput run; hostCPU
	// the hosts' part.
	cpu, hostCPU time.Duration
}

// Ranks measures, in one run, pulls per second with cfg.Concurrency
// logical requests in flight over a prefill and a decode engine of two
// ranks each: once as rank groups agreeing through an embedded etcd, once
// as four independent hosts, interleaved. Only the fake transport is
// supported; cfg.Params are not used.
func Ranks(ctx context.Context, out io.Writer, cfg HostsConfig) (err error) {
	if cfg.Transport != "fake" {
		return fmt.Errorf("bench ranks: only the fake transport is supported, not %q", cfg.Transport)
	}
	dir, err := os.MkdirTemp(agent.Dir(), "custody-bench-ranks-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	blocks := 2*cfg.Concurrency + 8
	modes := make([]*rankMode, 2)
	defer func() {
		for _, m := range modes {
			if m != nil {
				err = errors.Join(err, m.stop())
			}
		}
	}()
	for i, coordinated := range []bool{true, false} {
		name := map[bool]string{true: "coordinated", false: "independent"}[coordinated]
		if modes[i], err = startRankMode(ctx, cfg, name, filepath.Join(dir, name), coordinated, blocks); err != nil {
			return err
		}
	}
	rounds := make([][]ranksRound, 2)
	for n := range ranksBenchRounds {
		// Each mode goes first in every other round, so that neither
		// always meets the machine as the other left it.
		for k := range modes {
			i := (k + n) % len(modes)
			m := modes[i]
			r, err := m.round(ctx, cfg)
			if err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			rounds[i] = append(rounds[i], r)
		}
	}
	printRanks(out, cfg, [2]string{modes[0].name, modes[1].name}, rounds)
	return nil
}

// startRankMode starts one mode's rank set in dir, its watchers and blocks
// for cfg.Concurrency workers, and warms it up.
func startRankMode(ctx context.Context, cfg HostsConfig, name, dir string, coordinated bool, blocks int) (*rankMode, error) {
	set, err := cluster.StartRankSet(ctx, cluster.RankSetOptions{Custody: cfg.Custody, Dir: dir,
		Coordinated: coordinated, Blocks: blocks, BlockSize: cfg.BlockSize})
	if err != nil {
		return nil, fmt.Errorf("%s ranks: %w", name, err)
	}
	m := &rankMode{name: name, set: set, engines: newEngines(ctx, set.Prefill, set.Decode, cfg.Poll, dir)}
	if set.Etcd != "" {
		if m.etcd, err = clientv3.New(clientv3.Config{Endpoints: []string{set.Etcd}, DialTimeout: 5 * time.Second}); err != nil {
			return nil, errors.Join(fmt.Errorf("etcd %s: %w", set.Etcd, err), m.stop())
		}
	}
	if err := m.prepare(ctx, cfg.Concurrency); err != nil {
		return nil, errors.Join(fmt.Errorf("%s: %w", name, err), m.stop())
	}
	if _, _, err := m.sequential(ctx, "warm", e2eWarmup); err != nil {
		return nil, errors.Join(fmt.Errorf("%s: warm-up: %w", name, err), m.stop())
	}
	return m, nil
}

func (m *rankMode) stop() error {
	m.engines.stop()
	var err error
	if m.etcd != nil {
		err = m.etcd.Close()
	}
	return errors.Join(err, m.set.Stop())
}
