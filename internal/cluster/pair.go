package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/custody-dev/custody/client"
)

// Defaults of StartPair and StartRankSet.
const (
	defaultBlocks    = 256
	defaultBlockSize = 16 << 10
	// fixtureCap is the hold cap of their hosts: no fault holds a
	// transfer, so it is never reached.
	fixtureCap = 2 * time.Minute
)

// PairOptions configure StartPair. Zero values mean the defaults.
type PairOptions struct {
	// Custody is the custody binary to run hosts with (required).
	Custody string
	// Transport is "fake" (default), "ucx" or "nixl"; Params are its
	// parameters.
	Transport string
	Params    map[string]string
	// Dir holds the hosts' configs, logs, sockets and pools (required).
	Dir string
	// Blocks per pool (default 256) of BlockSize bytes (default 16 KiB).
	Blocks, BlockSize int
}

// Pair is a prefill and a decode host, decode connected to prefill and
// prefill to decode.
type Pair struct {
	Prefill, Decode *Host
}

// StartPair starts the two hosts as the demo starts them, without faults,
// and connects them; Stop ends them.
func StartPair(ctx context.Context, o PairOptions) (*Pair, error) {
	if o.Custody == "" || o.Dir == "" {
		return nil, errors.New("start pair: the custody binary and a directory are required")
	}
	if o.Transport == "" {
		o.Transport = "fake"
	}
	if o.Blocks == 0 {
		o.Blocks = defaultBlocks
	}
	if o.BlockSize == 0 {
		o.BlockSize = defaultBlockSize
	}
	spec := func(name string) Spec {
		p := maps.Clone(o.Params)
		if p == nil {
			p = map[string]string{}
		}
		if o.Transport == "fake" {
			p["dir"] = o.Dir
		}
		return Spec{Name: name, Dir: o.Dir, Custody: o.Custody, Transport: o.Transport, Params: p,
			Cap: fixtureCap, Policy: "fence", Blocks: o.Blocks, BlockSize: o.BlockSize, LogLevel: "warn"}
	}
	return StartPairOf(ctx, spec("prefill"), spec("decode"))
}

// StartPairOf starts a prefill host from prefill and then a decode host
// from decode, and connects each to the other as a peer named after the
// other's Spec.Name.
func StartPairOf(ctx context.Context, prefill, decode Spec) (*Pair, error) {
	pp := &Pair{}
	var err error
	if pp.Prefill, err = StartHost(ctx, prefill); err != nil {
		return nil, err
	}
	if pp.Decode, err = StartHost(ctx, decode); err != nil {
		return nil, errors.Join(err, pp.Stop())
	}
	p, d := pp.Prefill, pp.Decode
	if err := d.Client.ConnectPeer(ctx, p.Name, client.RemoteRank{Address: p.MetaAddr, Pool: "kv"}); err != nil {
		return nil, errors.Join(fmt.Errorf("%s: connect %s: %w", d.Name, p.Name, err), pp.Stop())
	}
	if err := p.Client.ConnectPeer(ctx, d.Name, client.RemoteRank{Address: d.MetaAddr, Pool: "kv"}); err != nil {
		return nil, errors.Join(fmt.Errorf("%s: connect %s: %w", p.Name, d.Name, err), pp.Stop())
	}
	return pp, nil
}

// Stop ends both hosts (SIGTERM, then a wait); a host that did not stop
// cleanly is an error.
func (pp *Pair) Stop() error {
	var errs []error
	for _, h := range []*Host{pp.Decode, pp.Prefill} {
		if h != nil {
			errs = append(errs, h.Stop())
		}
	}
	return errors.Join(errs...)
}
