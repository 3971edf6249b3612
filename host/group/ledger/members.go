package ledger

import "strings"

// memberEntry is one rank's slot in this rank's view of the group.
type memberEntry struct {
	present bool
	member  string
	// lease is the one the member's key is attached to: an expiry is
	// written only while each rank it names still holds it (expire.go).
	lease int64
	rec   memberRecord
	// err is set when the rank's record failed validation.
	err error
}

// LostRank is a rank whose membership key went away: its lease expired or
// was revoked. Every request it had not reported terminal fails (rule 10).
type LostRank struct {
	Rank   int
	Member string
	// Revision is etcd's revision of the deletion.
	Revision int64
}

// members is the membership as the watch showed it, and this rank's join.
type members struct {
	view []memberEntry
	lost []LostRank
	// selfLost: this rank's membership is gone (its key deleted, a write
	// refused for it, or its lease's keep-alives stopped).
	selfLost bool
	// mode is the mode this rank joins with (no transport before Join);
	// joinSnap the first view in which every rank was present and this
	// rank held its own key; joined once the ranks agreed on it.
	mode     Mode
	joinSnap []memberEntry
	joined   bool
}

// applyMember applies one membership event.
func (l *Ledger) applyMember(ev Event) {
	rank, err := ParseRank(strings.TrimPrefix(ev.Key, l.keys.Members()), l.cfg.Size)
	if err != nil {
		l.log.Error("group_bad_member_key", "key", ev.Key, "error", err)
		return
	}
	if ev.Delete {
		l.dropMember(rank, ev.Rev)
		return
	}
	m := &l.members
	e := memberEntry{present: true, lease: ev.Lease}
	e.rec, e.err = decodeMember(ev.Value, rank)
	e.member = e.rec.Member
	if old := m.view[rank]; old.present && old.member != e.member {
		l.dropMember(rank, ev.Rev)
	}
	m.view[rank] = e
	if e.err != nil {
		l.log.Error("group_bad_member_record", "rank", rank, "error", e.err)
	} else if m.joined && len(Diff(m.mode, e.rec.Mode)) > 0 {
		l.log.Error("group_rank_mode_differs", "rank", rank, "member", e.member,
			"error", (&ModeMismatchError{Engine: l.cfg.Engine, Rank: rank, RefRank: l.cfg.Rank, Diffs: Diff(m.mode, e.rec.Mode)}).Error())
	}
	l.checkComplete()
}

// dropMember records rank's loss.
func (l *Ledger) dropMember(rank int, rev int64) {
	m := &l.members
	old := m.view[rank]
	if !old.present {
		return
	}
	m.view[rank] = memberEntry{}
	m.lost = append(m.lost, LostRank{Rank: rank, Member: old.member, Revision: rev})
	if rank == l.cfg.Rank && old.member == l.cfg.Member {
		m.selfLost = true
	}
	l.log.Warn("group_rank_lost", "engine", l.cfg.Engine, "rank", rank, "member", old.member, "revision", rev)
}

// reloadMembers replaces the membership with kvs, read at rev, recording
// as lost every rank that went away unseen.
func (l *Ledger) reloadMembers(kvs []KV, rev int64) {
	next := make([]memberEntry, l.cfg.Size)
	for _, kv := range kvs {
		rank, err := ParseRank(strings.TrimPrefix(kv.Key, l.keys.Members()), l.cfg.Size)
		if err != nil {
			l.log.Error("group_bad_member_key", "key", kv.Key, "error", err)
			continue
		}
		e := memberEntry{present: true, lease: kv.Lease}
		e.rec, e.err = decodeMember(kv.Value, rank)
		e.member = e.rec.Member
		next[rank] = e
	}
	for rank, old := range l.members.view {
		if old.present && (!next[rank].present || next[rank].member != old.member) {
			l.dropMember(rank, rev)
		}
	}
	copy(l.members.view, next)
	l.checkComplete()
}

// Members snapshots the member id of each rank ("" where absent).
func (l *Ledger) Members() []string {
	m := make([]string, len(l.members.view))
	for i, e := range l.members.view {
		m[i] = e.member
	}
	return m
}

// Live reports, per rank, whether its membership key is present.
func (l *Ledger) Live() []bool {
	live := make([]bool, len(l.members.view))
	for i, e := range l.members.view {
		live[i] = e.present
	}
	return live
}

// Missing lists the ranks whose membership key is absent.
func (l *Ledger) Missing() []int {
	var missing []int
	for r, e := range l.members.view {
		if !e.present {
			missing = append(missing, r)
		}
	}
	return missing
}

// LostRanks lists every rank loss seen, oldest first.
func (l *Ledger) LostRanks() []LostRank { return append([]LostRank(nil), l.members.lost...) }

// SelfLost reports whether this rank's membership is gone.
func (l *Ledger) SelfLost() bool { return l.members.selfLost }

// LoseSelf records that this rank's membership is gone: its lease's
// keep-alives stopped while the group was open.
func (l *Ledger) LoseSelf() { l.members.selfLost = true }

// lowestLive says whether this rank is the lowest rank with a member in
// now: the one that collects what no rank owns.
func (l *Ledger) lowestLive(now []string) bool {
	for rank, m := range now {
		if m != "" {
			return rank == l.cfg.Rank
		}
	}
	return false
}
