package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/custody-dev/custody/client"
)

// RankSetOptions configure StartRankSet. Zero values mean the defaults.
type RankSetOptions struct {
	// Custody is the custody binary to run hosts with (required).
	Custody string
	// Dir holds the hosts' configs, logs, sockets, pools and, when
	// coordinated, the etcd's data (required).
	Dir string
	// Coordinated makes each engine's two ranks a rank group agreeing
	// through an etcd embedded in prefill rank 0, as RunRanks starts them;
	// otherwise each rank is an independent host with no group section.
	Coordinated bool
	// Blocks per pool (default 256) of BlockSize bytes (default 16 KiB).
	Blocks, BlockSize int
	// LeaseTTL is each rank's membership lease (default 10 s; no rank of a
	// rank set is killed, so a short one only risks a rank starved of CPU
	// for that long being counted lost).
	LeaseTTL time.Duration
}

// RankSet is a prefill engine and a decode engine of two ranks each, on
// the fake transport without faults; every decode rank is connected to the
// prefill engine as peer "prefill" (rank r of it is prefill rank r): by
// "engine:pre" when coordinated, else by the prefill ranks' names in the
// decode ranks' static peer lists.
type RankSet struct {
	Prefill, Decode []*Host
	// Etcd is the embedded etcd's client address ("" when not coordinated).
	Etcd string
}

// StartRankSet starts the four hosts and connects them; Stop ends them.
func StartRankSet(ctx context.Context, o RankSetOptions) (*RankSet, error) {
	if o.Custody == "" || o.Dir == "" {
		return nil, errors.New("start rank set: the custody binary and a directory are required")
	}
	if o.Blocks == 0 {
		o.Blocks = 256
	}
	if o.BlockSize == 0 {
		o.BlockSize = 16 << 10
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = 10 * time.Second
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	rs := &RankSet{}
	if o.Coordinated {
		addr, err := freePort()
		if err != nil {
			return nil, err
		}
		rs.Etcd = addr
	}
	spec := func(engine string, rank int) hostSpec {
		s := hostSpec{name: fmt.Sprintf("%s-%d", engine, rank), dir: o.Dir, custody: o.Custody, transport: "fake",
			params: map[string]string{"dir": o.Dir}, cap: 2 * time.Minute, policy: "fence",
			blocks: o.Blocks, blockSize: o.BlockSize, logLevel: "warn"}
		if !o.Coordinated {
			if engine == "dec" { // the prefill ranks by name, as a group would find them
				for _, p := range rs.Prefill {
					s.peers = append(s.peers, map[string]any{"name": p.Name, "address": p.p.metaAddr})
				}
			}
			return s
		}
		coord := map[string]any{"endpoints": []string{rs.Etcd}}
		if engine == "pre" && rank == 0 {
			coord = map[string]any{"embedded": map[string]any{"dir": filepath.Join(o.Dir, "etcd"), "listen": rs.Etcd}}
		} else if engine == "pre" {
			coord = map[string]any{"embedded": map[string]any{"listen": rs.Etcd}}
		}
		s.group = map[string]any{"engine": engine, "rank": rank, "size": 2, "coordinator": coord,
			"timeouts": map[string]any{"lease_ttl": o.LeaseTTL.String(), "join": "20s"}}
		return s
	}
	// The ranks of an engine start together: a group's Join waits for all.
	start := func(engine string) ([]*Host, error) {
		hs := make([]*Host, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r := range hs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				hp, err := startHost(ctx, spec(engine, r))
				if err != nil {
					errs[r] = err
					return
				}
				hs[r] = &Host{Name: hp.name, Client: hp.c, Pool: hp.poolID, Path: hp.pool, p: hp}
			}()
		}
		wg.Wait()
		return hs, errors.Join(errs...)
	}
	var err error
	rs.Prefill, err = start("pre")
	if err != nil {
		return nil, errors.Join(fmt.Errorf("prefill engine: %w", err), rs.Stop())
	}
	rs.Decode, err = start("dec")
	if err != nil {
		return nil, errors.Join(fmt.Errorf("decode engine: %w", err), rs.Stop())
	}
	remote := []client.RemoteRank{{Address: "engine:pre", Pool: "kv"}}
	if !o.Coordinated {
		remote = []client.RemoteRank{{Address: rs.Prefill[0].Name, Pool: "kv"}, {Address: rs.Prefill[1].Name, Pool: "kv"}}
	}
	for _, d := range rs.Decode {
		if err := d.Client.ConnectPeer(ctx, "prefill", remote...); err != nil {
			return nil, errors.Join(fmt.Errorf("%s: connect prefill: %w", d.Name, err), rs.Stop())
		}
	}
	return rs, nil
}

// Stop ends the hosts, decode first; a host that did not stop cleanly is
// an error.
func (rs *RankSet) Stop() error {
	var errs []error
	for _, hs := range [][]*Host{rs.Decode, rs.Prefill} {
		for i := len(hs) - 1; i >= 0; i-- {
			if hs[i] != nil {
				errs = append(errs, hs[i].p.stop())
			}
		}
	}
	return errors.Join(errs...)
}

// Pid is the host's process id (its transport process is its child).
func (h *Host) Pid() int { return h.p.cmd.Process.Pid }
