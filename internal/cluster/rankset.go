package cluster

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

// defaultLeaseTTL is a rank set's membership lease: no rank of it is
// killed, so a short one only risks a rank starved of CPU for that long
// being counted lost.
const defaultLeaseTTL = 10 * time.Second

// RankSetOptions configure StartRankSet. Zero values mean the defaults.
type RankSetOptions struct {
	// Custody is the custody binary to run hosts with (required).
	Custody string
	// Dir holds the hosts' configs, logs, sockets, pools and, when
	// coordinated, the etcd's data (required).
	Dir string
	// Coordinated makes each engine's two ranks a rank group agreeing
	// through an etcd embedded in prefill rank 0, as the ranks demo starts
	// them; otherwise each rank is an independent host with no group
	// section.
	Coordinated bool
	// Blocks per pool (default 256) of BlockSize bytes (default 16 KiB).
	Blocks, BlockSize int
	// LeaseTTL is each rank's membership lease (default 10 s).
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
		o.Blocks = defaultBlocks
	}
	if o.BlockSize == 0 {
		o.BlockSize = defaultBlockSize
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = defaultLeaseTTL
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	rs := &RankSet{}
	var etcd Etcd
	if o.Coordinated {
		var err error
		if etcd, err = NewEtcd("pre", filepath.Join(o.Dir, "etcd")); err != nil {
			return nil, err
		}
		rs.Etcd = etcd.Addr
	}
	spec := func(engine string, rank int) Spec {
		s := Spec{Name: fmt.Sprintf("%s-%d", engine, rank), Dir: o.Dir, Custody: o.Custody, Transport: "fake",
			Params: map[string]string{"dir": o.Dir}, Cap: fixtureCap, Policy: "fence",
			Blocks: o.Blocks, BlockSize: o.BlockSize, LogLevel: "warn"}
		if o.Coordinated {
			s.Group = etcd.Group(engine, rank, 2, o.LeaseTTL)
		} else if engine == "dec" { // the prefill ranks by name, as a group would find them
			for _, p := range rs.Prefill {
				s.Peers = append(s.Peers, map[string]any{"name": p.Name, "address": p.MetaAddr})
			}
		}
		return s
	}
	var err error
	if rs.Prefill, err = StartEngine(ctx, spec("pre", 0), spec("pre", 1)); err != nil {
		return nil, errors.Join(fmt.Errorf("prefill engine: %w", err), rs.Stop())
	}
	if rs.Decode, err = StartEngine(ctx, spec("dec", 0), spec("dec", 1)); err != nil {
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

// StartEngine starts the ranks of one engine together, as they must be (a
// group's Join waits for all): host i from specs[i], nil where it failed,
// with every failure in the error.
func StartEngine(ctx context.Context, specs ...Spec) ([]*Host, error) {
	hs := make([]*Host, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Add(1)
		go func() { defer wg.Done(); hs[i], errs[i] = StartHost(ctx, s) }()
	}
	wg.Wait()
	return hs, errors.Join(errs...)
}

// Stop ends the hosts, decode first; a host that did not stop cleanly is
// an error.
func (rs *RankSet) Stop() error {
	var errs []error
	for _, hs := range [][]*Host{rs.Decode, rs.Prefill} {
		for i := len(hs) - 1; i >= 0; i-- {
			if hs[i] != nil {
				errs = append(errs, hs[i].Stop())
			}
		}
	}
	return errors.Join(errs...)
}
