package group

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/custody-dev/custody/host/group/ledger"
)

// ErrNotPoisoned: ClearPoisonAt named a pool that is not poisoned.
var ErrNotPoisoned = errors.New("pool not poisoned")

// Operator is an operator's connection to the etcd of one engine's group,
// with no membership: it holds no rank and no lease. Make it with Dial;
// Close it after use.
type Operator struct {
	engine   string
	keys     ledger.Keys
	cli      *clientv3.Client
	endpoint string
	op       time.Duration
}

// Dial connects an operator to the etcd that cc names (an embedded etcd
// by its Listen address) for engine. timeout bounds each call (0: the
// default op timeout).
func Dial(engine string, cc CoordinatorConfig, timeout time.Duration) (*Operator, error) {
	if !engineName.MatchString(engine) {
		return nil, fmt.Errorf("engine %q: want 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit: %w", engine, ErrBadArgument)
	}
	endpoints := cc.Endpoints
	if cc.Embedded != nil {
		if cc.Embedded.Listen == "" {
			return nil, fmt.Errorf("group.coordinator.embedded.listen: required to reach rank 0's etcd: %w", ErrBadArgument)
		}
		endpoints = []string{cc.Embedded.Listen}
	}
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("no etcd endpoint: give the coordinator's endpoints or rank 0's embedded listen address: %w", ErrBadArgument)
	}
	for i, ep := range endpoints {
		if err := checkEndpoint(ep); err != nil {
			return nil, fmt.Errorf("etcd endpoint %d %q: %v: %w", i, ep, err, ErrBadArgument)
		}
	}
	if timeout <= 0 {
		timeout = DefaultOpTimeout
	}
	cli, err := dial(endpoints, cc.TLS, timeout)
	if err != nil {
		return nil, err
	}
	return &Operator{engine: engine, keys: ledger.NewKeys(engine), cli: cli, endpoint: strings.Join(endpoints, ","), op: timeout}, nil
}

// Close closes the connection.
func (o *Operator) Close() error { return o.cli.Close() }

func (o *Operator) wrap(what string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || isUnavailable(err) {
		return fmt.Errorf("engine %q: %s: %w at %s: %w; check that etcd runs and is reachable", o.engine, what, ErrCoordinator, o.endpoint, err)
	}
	return fmt.Errorf("engine %q: %s (etcd %s): %w", o.engine, what, o.endpoint, err)
}

// Poisoned lists the engine's poisoned pools, sorted by name.
func (o *Operator) Poisoned(ctx context.Context) ([]PoisonRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, o.op)
	defer cancel()
	resp, err := o.cli.Get(ctx, o.keys.Poisons(), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, o.wrap("listing poisoned pools", err)
	}
	return o.records(resp.Kvs), nil
}

// ClearPoison removes pool's poison (rule 11): the operator's action once
// the pool's memory is known safe again, for instance after every rank's
// engine restarted. The ranks see it through their watch. It returns the
// record removed; a pool that is not poisoned is ErrNotPoisoned, naming
// the pools that are, and changes nothing.
func (o *Operator) ClearPoison(ctx context.Context, pool string) (PoisonRecord, error) {
	if err := ledger.CheckPoolName(pool); err != nil {
		return PoisonRecord{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.op)
	defer cancel()
	key := o.keys.Poison(pool)
	resp, err := o.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), ">", 0)).
		Then(clientv3.OpGet(key), clientv3.OpDelete(key)).
		Else(clientv3.OpGet(o.keys.Poisons(), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))).
		Commit()
	if err != nil {
		return PoisonRecord{}, o.wrap(fmt.Sprintf("clearing the poison of pool %q", pool), err)
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if !resp.Succeeded {
		var names []string
		for _, r := range o.records(kvs) {
			names = append(names, r.Pool)
		}
		return PoisonRecord{}, fmt.Errorf("engine %q: pool %q: %w; poisoned pools: %v", o.engine, pool, ErrNotPoisoned, names)
	}
	return ledger.DecodePoison(pool, kvs[0].Value), nil
}

func (o *Operator) records(kvs []*mvccpb.KeyValue) []PoisonRecord {
	out := make([]PoisonRecord, 0, len(kvs))
	for _, kv := range kvs {
		pool := o.keys.PoolOf(string(kv.Key))
		out = append(out, ledger.DecodePoison(pool, kv.Value))
	}
	return out
}
