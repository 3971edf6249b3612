package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Join starts this rank's join with mode (rule 9; validated by the
// caller): it returns the transaction that publishes this rank's member
// record under its lease, if no member holds the rank. A group of size 1
// is joined at once and writes nothing.
func (l *Ledger) Join(mode Mode) (Txn, error) {
	m := &l.members
	if m.joined || m.mode.Transport != "" {
		return Txn{}, l.errorf("Join called twice")
	}
	m.mode = mode.Canonical()
	if l.solo() {
		m.joined = true
		return Txn{}, nil
	}
	raw, _ := json.Marshal(memberRecord{Proto: Proto, Engine: l.cfg.Engine, Rank: l.cfg.Rank, Size: l.cfg.Size, Member: l.cfg.Member, Mode: m.mode})
	key := l.keys.Member(l.cfg.Rank)
	return Txn{
		What: fmt.Sprintf("publishing rank %d's mode", l.cfg.Rank),
		If:   []Cmp{absent(key)},
		Then: []Op{put(key, string(raw), l.lease)},
		Else: []Op{get(key)},
	}, nil
}

// MemberWritten reads the answer to Join's transaction: the record is this
// member's, or another member holds the rank (ErrDuplicateRank; leaseTTL
// is the membership lease's, for the message).
func (l *Ledger) MemberWritten(res Result, leaseTTL time.Duration) error {
	if res.Succeeded {
		return nil
	}
	kvs := res.rangeOf(0)
	holder, lease := "(unreadable record)", int64(0)
	if len(kvs) == 1 {
		lease = kvs[0].Lease
		if rec, err := decodeMember(kvs[0].Value, l.cfg.Rank); err == nil {
			holder = rec.Member
		}
		if holder == l.cfg.Member {
			return nil
		}
	}
	return fmt.Errorf("group %q: rank %d is already held by member %s (lease %x); this host (member %s) is refused: another host is configured with rank %d, or an earlier process of this rank is alive or its lease (TTL %v) has not yet expired: %w",
		l.cfg.Engine, l.cfg.Rank, holder, lease, l.cfg.Member, l.cfg.Rank, leaseTTL, ErrDuplicateRank)
}

// checkComplete captures, for a join in progress, the first view in which
// every rank is present and this rank holds its own key. It runs after
// each membership event, so a rank that comes and goes between two reads
// is still seen.
func (l *Ledger) checkComplete() {
	m := &l.members
	if m.joinSnap != nil || m.mode.Transport == "" {
		return
	}
	for _, e := range m.view {
		if !e.present {
			return
		}
	}
	if m.view[l.cfg.Rank].member != l.cfg.Member {
		return
	}
	m.joinSnap = append([]memberEntry(nil), m.view...)
}

// JoinReady reports whether the view in which every rank is present has
// been seen: Agree may be called.
func (l *Ledger) JoinReady() bool { return l.members.joinSnap != nil }

// Agree checks every rank's record in the view JoinReady captured against
// rank 0's, and counts the rank joined if they agree. It reads nothing of
// this rank's own, so every rank reaches the same verdict: one error per
// differing rank, naming it, the field and both values.
func (l *Ledger) Agree() error {
	snap := l.members.joinSnap
	var errs []error
	for r, e := range snap {
		if e.err != nil {
			errs = append(errs, fmt.Errorf("group %q: %w", l.cfg.Engine, e.err))
			continue
		}
		if e.rec.Engine != l.cfg.Engine || e.rec.Size != l.cfg.Size {
			errs = append(errs, fmt.Errorf("group %q: rank %d is configured for engine %q of size %d, rank 0 for engine %q of size %d: %w",
				l.cfg.Engine, r, e.rec.Engine, e.rec.Size, snap[0].rec.Engine, snap[0].rec.Size, ErrModeMismatch))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	ref := snap[0].rec.Mode
	for r := 1; r < len(snap); r++ {
		if d := Diff(ref, snap[r].rec.Mode); len(d) > 0 {
			errs = append(errs, &ModeMismatchError{Engine: l.cfg.Engine, Rank: r, RefRank: 0, Diffs: d})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	l.members.joined = true
	return nil
}

// Joined reports whether Agree found the ranks agreeing (or the group is
// of size 1 and Join was called).
func (l *Ledger) Joined() bool { return l.members.joined }

// Mode is the mode this rank joins with (zero before Join).
func (l *Ledger) Mode() Mode { return l.members.mode }
