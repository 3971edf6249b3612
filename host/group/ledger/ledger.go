package ledger

import (
	"fmt"

	"github.com/custody-dev/custody/core"
)

// Logger takes the ledger's log records; hclog.Logger is one.
type Logger interface {
	Debug(msg string, args ...any)
	Warn(msg string, args ...any)
	Error(msg string, args ...any)
}

// Config is one rank's place in its group.
type Config struct {
	Engine string
	Rank   int
	// Size is the number of ranks; a group of size 1 writes nothing and
	// resolves each request from this rank's own state.
	Size int
	// Member is this process's member id: unique per process, so that a
	// second process claiming the same rank is told apart.
	Member string
}

// Ledger is one rank's book of its group: the membership, the requests
// this rank reported, the states records it wrote, and what its watch
// showed of the other ranks' records, expiries and poison. It decides
// everything the group decides (package doc) and does no I/O: it reads no
// clock, starts no goroutine and is not safe for concurrent use; its
// caller serialises every call.
type Ledger struct {
	cfg   Config
	keys  Keys
	log   Logger
	lease int64

	members members
	view    view
	book    book
	poison  map[string]PoisonRecord
}

// New is the ledger of a rank configured by cfg, logging to log.
func New(cfg Config, log Logger) *Ledger {
	return &Ledger{
		cfg: cfg, keys: NewKeys(cfg.Engine), log: log,
		members: members{view: make([]memberEntry, cfg.Size)},
		view:    newView(),
		book:    newBook(),
		poison:  map[string]PoisonRecord{},
	}
}

// SetLease gives the ledger this rank's membership lease: every write it
// plans is guarded by it, so that nothing a lost rank writes lands. Set it
// once, before the first event.
func (l *Ledger) SetLease(lease int64) { l.lease = lease }

// Rev is the revision up to which the ledger holds every event of the
// engine's prefix.
func (l *Ledger) Rev() int64 { return l.view.rev }

func (l *Ledger) solo() bool { return l.cfg.Size == 1 }

// errorf formats an error of this rank, as every error of the group reads.
func (l *Ledger) errorf(format string, args ...any) error {
	return fmt.Errorf("group %q rank %d: "+format, append([]any{l.cfg.Engine, l.cfg.Rank}, args...)...)
}

// Stats counts what the ledger holds.
type Stats struct {
	// InFlight is the number of request ids this rank still tracks.
	InFlight int
	// Unwritten is the number of writes (states, deletions) waiting for
	// the next flush.
	Unwritten int
	// Viewed is the number of request ids the view holds keys of (those
	// deleted included, until folded).
	Viewed int
}

// Stats returns the counts now.
func (l *Ledger) Stats() Stats {
	st := Stats{InFlight: len(l.book.reqs), Viewed: len(l.view.reqs)}
	if l.solo() {
		return st
	}
	for _, r := range l.book.reqs {
		if !r.written() || r.phase.expiryDue() {
			st.Unwritten++
		}
	}
	for _, rec := range l.book.records {
		if rec.due {
			st.Unwritten++
		}
	}
	st.Unwritten += len(l.book.collect)
	return st
}

// checkReported refuses, for op, an invalid id or one this rank never
// reported.
func (l *Ledger) checkReported(op string, ids []core.RequestID) error {
	for _, id := range ids {
		if err := CheckRequestID(id); err != nil {
			return l.errorf("%s: %w", op, err)
		}
		if l.book.reqs[id] == nil {
			return l.errorf("%s: request %q: %w: report its local terminal state first", op, id, ErrUnknownRequest)
		}
	}
	return nil
}
