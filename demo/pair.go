package demo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/custody-dev/custody/client"
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

// Host is one `custody serve` process of a Pair and an engine client
// for it.
type Host struct {
	Name   string
	Client *client.Client
	// Pool is the id of its pool "kv"; Path the pool's region file.
	Pool uint32
	Path string
	p    *hostProc
}

// Pair is a prefill and a decode host, started as the demo starts them
// (without faults), decode connected to prefill and prefill to decode.
type Pair struct {
	Prefill, Decode *Host
}

// StartPair starts the two hosts and connects them; Stop ends them.
func StartPair(ctx context.Context, o PairOptions) (*Pair, error) {
	if o.Custody == "" || o.Dir == "" {
		return nil, errors.New("start pair: the custody binary and a directory are required")
	}
	if o.Transport == "" {
		o.Transport = "fake"
	}
	if o.Blocks == 0 {
		o.Blocks = 256
	}
	if o.BlockSize == 0 {
		o.BlockSize = 16 << 10
	}
	spec := func(name string) hostSpec {
		p := map[string]string{}
		for k, v := range o.Params {
			p[k] = v
		}
		if o.Transport == "fake" {
			p["dir"] = o.Dir
		}
		return hostSpec{name: name, dir: o.Dir, custody: o.Custody, transport: o.Transport, params: p,
			cap: 2 * time.Minute, policy: "fence", blocks: o.Blocks, blockSize: o.BlockSize, logLevel: "warn"}
	}
	pp := &Pair{}
	for _, name := range []string{"prefill", "decode"} {
		hp, err := startHost(ctx, spec(name))
		if err != nil {
			return nil, errors.Join(err, pp.Stop())
		}
		h := &Host{Name: name, Client: hp.c, Pool: hp.poolID, Path: hp.pool, p: hp}
		if name == "prefill" {
			pp.Prefill = h
		} else {
			pp.Decode = h
		}
	}
	if err := pp.Decode.Client.ConnectPeer(ctx, "prefill", client.RemoteRank{Address: pp.Prefill.p.metaAddr, Pool: "kv"}); err != nil {
		return nil, errors.Join(fmt.Errorf("decode: connect prefill: %w", err), pp.Stop())
	}
	if err := pp.Prefill.Client.ConnectPeer(ctx, "decode", client.RemoteRank{Address: pp.Decode.p.metaAddr, Pool: "kv"}); err != nil {
		return nil, errors.Join(fmt.Errorf("prefill: connect decode: %w", err), pp.Stop())
	}
	return pp, nil
}

// Stop ends both hosts (SIGTERM, then a wait); a host that did not stop
// cleanly is an error.
func (pp *Pair) Stop() error {
	var errs []error
	for _, h := range []*Host{pp.Decode, pp.Prefill} {
		if h != nil {
			errs = append(errs, h.p.stop())
		}
	}
	return errors.Join(errs...)
}
