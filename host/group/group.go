package group

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"

	"github.com/custody-dev/custody/host/group/ledger"
)

// Group is one rank's membership in its engine's rank group. Make it with
// Open, call Join before any transport is built, then Report and Resolve
// every round; Close it last. Its methods are safe for concurrent use, but a
// host calls Report and Resolve from its one owner goroutine.
type Group struct {
	cfg    Config
	log    hclog.Logger
	keys   ledger.Keys
	member string

	// Coordinator, nil for a group of size 1.
	etcd  *embed.Etcd
	addr  string
	cli   *clientv3.Client
	lease clientv3.LeaseID

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// callMu serialises the calls that plan writes from the ledger and
	// run them (Report, Resolve, Expire) and Stats: it is held across
	// their etcd calls, so that a plan stays whole until its answers are
	// in. mu guards the ledger and what follows, and is never held across
	// an etcd call or a wait: the watch feeds the ledger meanwhile. Lock
	// order: callMu, then mu.
	callMu sync.Mutex
	mu     sync.Mutex
	l      *ledger.Ledger
	closed bool
	peers  map[string]PeerAddress // size 1 only
	// joinCh is closed once the ledger has seen every rank present
	// (joinSeen); moved is closed, and replaced, whenever the view's
	// revision advances.
	joinCh   chan struct{}
	joinSeen bool
	moved    chan struct{}
	changed  chan struct{}

	// writes and reads count etcd transactions, for Stats.
	writes, reads atomic.Uint64
}

// Open connects this rank to its group's coordinator (starting the embedded
// etcd on rank 0 when so configured), grants its membership lease and starts
// watching membership and poison. It returns within cfg.Timeouts.Dial (or
// ctx's deadline, if sooner); on error nothing is left running.
func Open(ctx context.Context, cfg Config, log hclog.Logger) (*Group, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if log == nil {
		log = hclog.NewNullLogger()
	}
	g := &Group{
		cfg:     cfg,
		log:     log.Named("group"),
		keys:    ledger.NewKeys(cfg.Engine),
		member:  newMemberID(),
		joinCh:  make(chan struct{}),
		moved:   make(chan struct{}),
		peers:   map[string]PeerAddress{},
		changed: make(chan struct{}, 1),
	}
	g.l = ledger.New(ledger.Config{Engine: cfg.Engine, Rank: cfg.Rank, Size: cfg.Size, Member: g.member}, g.log)
	g.ctx, g.cancel = context.WithCancel(context.Background())
	if cfg.Solo() {
		return g, nil
	}
	if err := g.connect(ctx); err != nil {
		g.shutdown()
		return nil, err
	}
	return g, nil
}

func (g *Group) connect(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeouts.Dial)
	defer cancel()
	cc := g.cfg.Coordinator
	endpoints := cc.Endpoints
	if e := cc.Embedded; e != nil {
		if g.cfg.Rank == 0 {
			etcd, addr, err := startEmbedded(ctx, e.Dir, e.Listen, g.cfg.Coordinator.MaxTxnOps)
			if err != nil {
				return err
			}
			g.etcd, g.addr = etcd, addr
		} else {
			g.addr = e.Listen
		}
		endpoints = []string{g.addr}
	}
	var cli *clientv3.Client
	if g.etcd != nil {
		// The rank that runs the etcd calls it in-process: no socket, no
		// HTTP/2 framing, for its writes, its watch and its lease.
		cli = v3client.New(g.etcd.Server)
	} else {
		var err error
		if cli, err = dial(endpoints, cc.TLS, g.cfg.Timeouts.Dial); err != nil {
			return err
		}
	}
	g.cli = cli
	lease, err := cli.Grant(ctx, int64(g.cfg.Timeouts.LeaseTTL/time.Second))
	if err != nil {
		return g.wrap(fmt.Sprintf("granting rank %d's membership lease", g.cfg.Rank), err)
	}
	g.lease = lease.ID
	g.mu.Lock()
	g.l.SetLease(int64(lease.ID))
	g.mu.Unlock()
	keep, err := cli.KeepAlive(g.ctx, lease.ID)
	if err != nil {
		return g.wrap("keeping the membership lease alive", err)
	}
	g.wg.Add(1)
	go g.keepAlive(keep)
	return g.startWatch(ctx)
}

// keepAlive drains the lease's keep-alive answers; when they stop while
// the group is open, the lease may be gone and this rank is no longer a
// member.
func (g *Group) keepAlive(ch <-chan *clientv3.LeaseKeepAliveResponse) {
	defer g.wg.Done()
	for range ch {
	}
	if g.ctx.Err() == nil {
		g.log.Error("group_lease_lost", "engine", g.cfg.Engine, "rank", g.cfg.Rank,
			"error", "keep-alives stopped: etcd unreachable past the lease TTL or the lease was revoked")
		g.mu.Lock()
		g.l.LoseSelf()
		g.mu.Unlock()
		g.notify()
	}
}

// CoordinatorAddr is the etcd client address this rank uses (rank 0's
// embedded etcd: the address it got); empty for a group of size 1.
func (g *Group) CoordinatorAddr() string { return g.addr }

// Member is this process's member id: unique per process, so a second
// process claiming the same rank is told apart.
func (g *Group) Member() string { return g.member }

// Rank is this rank; Size the group's.
func (g *Group) Rank() int { return g.cfg.Rank }

// Size is the number of ranks.
func (g *Group) Size() int { return g.cfg.Size }

// Changed is signalled (coalesced, never blocking the group) when a rank
// joins or is lost, this rank's membership is lost, a pool is poisoned or
// cleared, or the watch brings another rank's states, an expiry or the
// deletion of another rank's states or of an expiry (never this member's
// own states coming back).
// Read LostRanks, Live, Err and Poisoned, and Resolve, then.
func (g *Group) Changed() <-chan struct{} { return g.changed }

func (g *Group) notify() {
	select {
	case g.changed <- struct{}{}:
	default:
	}
}

// Err is nil while this rank is a member in good standing; ErrSessionLost
// once its lease is gone, and ErrClosed after Close.
func (g *Group) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.closed:
		return ErrClosed
	case g.l.SelfLost():
		return fmt.Errorf("group %q rank %d: %w: fail every request and restart the host", g.cfg.Engine, g.cfg.Rank, ErrSessionLost)
	}
	return nil
}

// Close leaves the group: it revokes the lease (the other ranks see this
// rank lost), stops every goroutine the group started, closes the client,
// and stops the embedded etcd if this rank runs it. Durable records
// (poison, terminal states) stay. Close is idempotent.
func (g *Group) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	g.mu.Unlock()
	var err error
	if g.cli != nil && g.lease != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), g.cfg.Timeouts.Op)
		if _, rerr := g.cli.Revoke(ctx, g.lease); rerr != nil {
			err = g.wrap("revoking the membership lease (the other ranks see this rank lost when it expires)", rerr)
		}
		cancel()
	}
	g.shutdown()
	return err
}

func (g *Group) shutdown() {
	g.cancel()
	if g.cli != nil {
		_ = g.cli.Close()
	}
	g.wg.Wait()
	if g.etcd != nil {
		g.etcd.Close()
	}
}

// opCtx bounds one etcd call by the op timeout and the caller's deadline.
func (g *Group) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, g.cfg.Timeouts.Op)
}

// wrap turns an etcd error into one that says what failed, where, and what
// to do; timeouts and unreachable servers also match ErrCoordinator.
func (g *Group) wrap(what string, err error) error {
	endpoints := g.addr
	if endpoints == "" {
		endpoints = fmt.Sprint(g.cfg.Coordinator.Endpoints)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || isUnavailable(err) {
		return fmt.Errorf("group %q rank %d: %s: %w at %s: %w; check that etcd runs and is reachable", g.cfg.Engine, g.cfg.Rank, what, ErrCoordinator, endpoints, err)
	}
	return fmt.Errorf("group %q rank %d: %s (etcd %s): %w", g.cfg.Engine, g.cfg.Rank, what, endpoints, err)
}

func (g *Group) checkOpen() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return fmt.Errorf("group %q rank %d: %w", g.cfg.Engine, g.cfg.Rank, ErrClosed)
	}
	return nil
}

func newMemberID() string {
	host, _ := os.Hostname()
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
