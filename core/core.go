package core

import (
	"fmt"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// Core is the ownership engine of one engine rank: it owns every block,
// peer, descriptor list and transfer handle on the engine's behalf and
// decides when each may be let go. It is a state machine with one owner
// goroutine; see the package documentation for the caller's obligations.
type Core struct {
	cfg Config

	// The attached transport: attached is false before Attach, after its
	// epoch is fenced and once closed. events: it has an EventSource.
	attached bool
	events   bool
	desc     sdk.Description
	epoch    Epoch
	maxEpoch Epoch
	batch    int
	resync   bool // poll every live handle next round (an event batch may be lost)

	// Work handed out and not yet reported (Done), by id.
	pending  map[WorkID]*pendingWork
	nextWork WorkID
	roundOut int // pending Notifications, Events and Poll work
	timeouts int // consecutive calls that timed out
	closing  bool
	closeErr error // the last pool release of Close that failed

	pools   []*pool // PoolID-1 indexes
	strayRg []strayRegion

	peers   map[string]*peer // connected (published) peers by name
	retired []*peer          // removed peers whose native resources are still held
	journal map[string][]entry
	rolling map[string]bool       // peers whose journal rollback is under way
	shaking map[string]*handshake // handshakes under way by peer name
	waiting map[string][]*request

	reqs      reqIndex                 // every request not yet reported
	sends     map[RequestID]*request   // sends awaiting consumer notifications
	early     map[RequestID]*earlyNote // consumer notifications that came before their send
	recvs     map[RequestID]*recv      // push receives awaiting written notifications
	earlyW    map[RequestID]*earlyNote // written notifications that came before their receive
	earlyQ    []earlyRef               // early and earlyW entries by age, from earlyHead on
	earlyHead int
	recent    recentIDs[recentKey] // sends and receives reported lately: their notifications are late
	taken     recentIDs[takenKey]  // requests reported lately: a call repeating one is a retry

	live     handleIndex // every handle of the attached epoch not yet released
	releaseQ []*xfer     // terminal handles to release in the next Ready
	retryQ   []*xfer     // handles whose Release failed: queued again next round
	holdQ    []holdEntry
	holdHead int
	leases   leaseHeap
	leaked   map[Ref]*xfer // forgotten without release (escalation); still held natively

	fenceWant map[Epoch]bool
	dirty     []*request

	inbox  Inbox
	inBuf  []input
	xBuf   []*xfer
	now    int64
	closed bool

	out Ready
}

// New returns a Core with no transport attached. Config's zero value means
// the defaults.
func New(cfg Config) (*Core, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Core{
		cfg:       cfg,
		peers:     map[string]*peer{},
		journal:   map[string][]entry{},
		rolling:   map[string]bool{},
		shaking:   map[string]*handshake{},
		pending:   map[WorkID]*pendingWork{},
		waiting:   map[string][]*request{},
		reqs:      newReqIndex(),
		sends:     map[RequestID]*request{},
		early:     map[RequestID]*earlyNote{},
		recvs:     map[RequestID]*recv{},
		earlyW:    map[RequestID]*earlyNote{},
		recent:    newRecentIDs[recentKey](cfg.MaxEarlyNotifications),
		taken:     newRecentIDs[takenKey](cfg.MaxRecentRequests),
		live:      newHandleIndex(),
		leaked:    map[Ref]*xfer{},
		fenceWant: map[Epoch]bool{},
	}, nil
}

// Inbox is the queue of what the owner learned outside a command, applied
// by the next Poll.
func (c *Core) Inbox() *Inbox { return &c.inbox }

// Epoch is the epoch of the attached transport, or zero when none is.
func (c *Core) Epoch() Epoch {
	if !c.attached {
		return 0
	}
	return c.epoch
}

// Attach adopts an opened transport as epoch, which must be larger than every
// epoch attached before; desc is what its Describe returned, and events says
// whether it implements sdk.EventSource (used when desc claims events).
// Pools registered under a fenced epoch are registered again on it (Work in
// the next Ready; PoolState says when each is done); peers must be connected
// again (their metadata changed with the process). Attach is refused while
// another epoch is attached: fence it (Fenced) or Close first.
//
// If registering a pool again fails, the transport stays attached as epoch,
// with some pools registered on it and the others not, and core asks for a
// fence of the epoch (Ready.Fence) with an Alert naming the pool: fence it
// (kill the process, then report Fenced(epoch)) and Attach a new transport
// with a larger epoch.
func (c *Core) Attach(epoch Epoch, desc sdk.Description, events bool) error {
	switch {
	case c.closed:
		return fmt.Errorf("core: attach epoch %d: the Core is closed; make a new one", epoch)
	case c.attached:
		return fmt.Errorf("core: attach epoch %d: epoch %d is still attached; report it fenced (Fenced) or Close first", epoch, c.epoch)
	case epoch <= c.maxEpoch:
		return fmt.Errorf("core: attach epoch %d: epochs must grow and %d was already used; pass a larger one", epoch, c.maxEpoch)
	}
	c.attached, c.desc, c.epoch, c.maxEpoch = true, desc, epoch, epoch
	c.events = events && desc.Capabilities.Events
	c.batch = c.cfg.Batch
	if c.batch == 0 {
		c.batch = DefaultBatch
		if m := int(desc.Limits.MaxItemsPerCall); m > 0 && m < c.batch {
			c.batch = m
		}
	}
	c.resync, c.timeouts = false, 0
	for _, p := range c.pools {
		if p.failed == nil {
			c.registerPool(p, true)
		}
	}
	return nil
}

// Fenced tells the owner that the transport of epoch is fenced: its process
// is dead, so none of its transfers moves a byte any more. Every handle of
// the epoch becomes terminal (its request fails with ErrFenced unless it
// already ended) and is forgotten without Release, and every peer, dlist and
// registration of the epoch is dropped: they died with the process. A stale
// or unknown epoch changes nothing. After fencing the attached epoch, Attach
// a new transport.
func (c *Core) Fenced(epoch Epoch) { c.applyFence(epoch) }

// Owner says who holds a block; OwnerFree for a block that does not exist.
func (c *Core) Owner(b BlockRef) Owner {
	p := c.pool(b.Pool)
	if p == nil || b.Block >= uint32(len(p.owner)) {
		return OwnerFree
	}
	return p.owner[b.Block]
}

// Stats counts what the Core holds now.
type Stats struct {
	// Requests not yet reported, and of them those waiting for a handshake.
	Requests, Waiting int
	// Live handles (not yet released), and of them those retained: their
	// session was closed or their peer removed while they ran.
	Live, Retained int
	// Peers connected; RetiredPeers removed but with native resources held.
	Peers, RetiredPeers int
	// Journal entries: native handshake resources not yet published nor
	// rolled back.
	Journal int
	// Leaked handles were forgotten without release by escalation
	// (EscalateQuarantine, EscalateReleaseAndReuse); the transport still
	// holds them until it is closed or fenced.
	Leaked int
	// Quarantined blocks.
	Quarantined int
}

// Stats counts what the Core holds now. It walks every live handle and
// block, so call it for metrics or tests, not every round.
func (c *Core) Stats() Stats {
	s := Stats{Requests: c.reqs.len(), Live: c.live.len(), Peers: len(c.peers), RetiredPeers: len(c.retired), Leaked: len(c.leaked)}
	for _, w := range c.waiting {
		s.Waiting += len(w)
	}
	for x := range c.live.all() {
		if x.flags&fRetained != 0 {
			s.Retained++
		}
	}
	for _, j := range c.journal {
		s.Journal += len(j)
	}
	for _, p := range c.pools {
		for _, o := range p.owner {
			if o == OwnerQuarantined {
				s.Quarantined++
			}
		}
	}
	return s
}

func (c *Core) setNow(now time.Time) { c.now = now.UnixNano() }

func (c *Core) alert(a Alert) { c.out.Alerts = append(c.out.Alerts, a) }

func (c *Core) markDirty(r *request) {
	if r.flags&rDirty == 0 {
		r.flags |= rDirty
		c.dirty = append(c.dirty, r)
	}
}

// unknownOutcome reports whether a call-level error leaves it unknown whether
// the call took effect (sdk.Transport's batched-call rule).
func unknownOutcome(err error) bool {
	code := sdk.CodeOf(err)
	return code == sdk.CodeTimeout || code == sdk.CodePluginShutdown
}

// each calls f on [lo, hi) windows of at most batch items.
func each(n, batch int, f func(lo, hi int)) {
	for lo := 0; lo < n; lo += batch {
		f(lo, min(lo+batch, n))
	}
}
