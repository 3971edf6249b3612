package bench

import (
	"context"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/custody-dev/custody/internal/cluster"
)

// round measures sequential latency, then throughput with cfg.Concurrency
// in flight, counting the etcd writes and the CPU time spent meanwhile.
func (m *rankMode) round(ctx context.Context, cfg HostsConfig) (ranksRound, error) {
	var r ranksRound
	var err error
	if r.seq, _, err = m.sequential(ctx, "seq", ranksSeqPulls); err != nil {
		return r, err
	}
	var count func() (map[string]int, int64, error)
	if m.etcd != nil {
		if count, err = m.countWrites(ctx); err != nil {
			return r, err
		}
	}
	all0, own0, err := hostsCost(m.hosts())
	if err != nil {
		return r, err
	}
	conc, el, cerr := m.concurrent(ctx, cfg.Concurrency, cfg.Duration)
	all1, own1, err := hostsCost(m.hosts())
	if err != nil {
		return r, err
	}
	if cerr != nil {
		return r, cerr
	}
	r.conc, r.elapsed = conc, el
	r.cpu, r.hostCPU = all1.Sub(all0).CPU, own1.Sub(own0).CPU
	r.rate = float64(len(r.conc)) / r.elapsed.Seconds()
	if count != nil {
		if r.writes, r.revs, err = count(); err != nil {
			return r, err
		}
	}
	return r, nil
}

// countWrites reads every ranked host's count of etcd write transactions
// (Status group_writes) and etcd's revision; the function it returns reads
// them again and returns the writes made since per "engine/rank" and the
// revisions passed. Nothing watches etcd for it: a watch of every key would
// cost the coordinated hosts' etcd what it measures.
func (m *rankMode) countWrites(ctx context.Context) (func() (map[string]int, int64, error), error) {
	read := func() (map[string]uint64, int64, error) {
		n := map[string]uint64{}
		for _, hs := range []struct {
			engine string
			hosts  []*cluster.Host
		}{{"pre", m.set.Prefill}, {"dec", m.set.Decode}} {
			for r, h := range hs.hosts {
				st, err := h.Client.Status(ctx)
				if err != nil {
					return nil, 0, fmt.Errorf("%s: status: %w", h.Name, err)
				}
				n[hs.engine+"/"+strconv.Itoa(r)] = st.GetGroupWrites()
			}
		}
		resp, err := m.etcd.Get(ctx, "/custody/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return nil, 0, fmt.Errorf("etcd: current revision: %w", err)
		}
		return n, resp.Header.Revision, nil
	}
	before, from, err := read()
	if err != nil {
		return nil, err
	}
	return func() (map[string]int, int64, error) {
		after, to, err := read()
		if err != nil {
			return nil, 0, err
		}
		out := map[string]int{}
		for k, v := range after {
			out[k] = int(v - before[k])
		}
		return out, to - from, nil
	}, nil
}
