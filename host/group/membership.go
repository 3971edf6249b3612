package group

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/custody-dev/custody/host/group/ledger"
)

// maxMemberRecord bounds a member record read from etcd.
const maxMemberRecord = 64 << 10

// memberRecord is what a rank publishes under its lease at Join.
type memberRecord struct {
	Proto  int    `json:"proto"`
	Engine string `json:"engine"`
	Rank   int    `json:"rank"`
	Size   int    `json:"size"`
	Member string `json:"member"`
	Mode   Mode   `json:"mode"`
}

// memberEntry is one rank's slot in this rank's view of the group.
type memberEntry struct {
	present bool
	member  string
	rec     memberRecord
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

// decodeMember validates a member record read from key rank.
func decodeMember(raw []byte, rank int) (memberRecord, error) {
	var rec memberRecord
	if len(raw) > maxMemberRecord {
		return rec, fmt.Errorf("rank %d's member record is %d bytes, over the %d limit: %w", rank, len(raw), maxMemberRecord, ErrMalformed)
	}
	var head struct {
		Proto int `json:"proto"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return rec, fmt.Errorf("rank %d's member record does not decode: %v: %w", rank, err, ErrMalformed)
	}
	if head.Proto != ledger.Proto {
		return rec, fmt.Errorf("rank %d speaks group protocol %d, this rank %d: %w; run the same custody version on every rank", rank, head.Proto, ledger.Proto, ErrMixedContract)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return rec, fmt.Errorf("rank %d's member record does not decode: %v: %w", rank, err, ErrMalformed)
	}
	if rec.Rank != rank || rec.Member == "" {
		return rec, fmt.Errorf("rank %d's member record names rank %d member %q: %w", rank, rec.Rank, rec.Member, ErrMalformed)
	}
	return rec, nil
}

// applyMember applies one membership event. Called with g.mu held.
func (g *Group) applyMember(ev *clientv3.Event) {
	rank, err := ledger.ParseRank(strings.TrimPrefix(string(ev.Kv.Key), g.keys.Members()), g.cfg.Size)
	if err != nil {
		g.log.Error("group_bad_member_key", "key", string(ev.Kv.Key), "error", err)
		return
	}
	if ev.Type == clientv3.EventTypeDelete {
		g.dropMember(rank, ev.Kv.ModRevision)
		return
	}
	e := memberEntry{present: true}
	e.rec, e.err = decodeMember(ev.Kv.Value, rank)
	e.member = e.rec.Member
	if old := g.view[rank]; old.present && old.member != e.member {
		g.dropMember(rank, ev.Kv.ModRevision)
	}
	g.view[rank] = e
	g.notify()
	if e.err != nil {
		g.log.Error("group_bad_member_record", "rank", rank, "error", e.err)
	} else if g.joined && len(Diff(g.mode, e.rec.Mode)) > 0 {
		g.log.Error("group_rank_mode_differs", "rank", rank, "member", e.member,
			"error", (&ModeMismatchError{Engine: g.cfg.Engine, Rank: rank, RefRank: g.cfg.Rank, Diffs: Diff(g.mode, e.rec.Mode)}).Error())
	}
	g.checkComplete()
}

// dropMember records rank's loss. Called with g.mu held.
func (g *Group) dropMember(rank int, rev int64) {
	old := g.view[rank]
	if !old.present {
		return
	}
	g.view[rank] = memberEntry{}
	g.lost = append(g.lost, LostRank{Rank: rank, Member: old.member, Revision: rev})
	if rank == g.cfg.Rank && old.member == g.member {
		g.selfLost = true
	}
	g.log.Warn("group_rank_lost", "engine", g.cfg.Engine, "rank", rank, "member", old.member, "revision", rev)
	g.notify()
}

// resyncMembers replaces the view with kvs, recording as lost every rank
// that went away unseen. Called with g.mu held.
func (g *Group) resyncMembers(kvs []*mvccpb.KeyValue, rev int64) {
	next := make([]memberEntry, g.cfg.Size)
	for _, kv := range kvs {
		rank, err := ledger.ParseRank(strings.TrimPrefix(string(kv.Key), g.keys.Members()), g.cfg.Size)
		if err != nil {
			g.log.Error("group_bad_member_key", "key", string(kv.Key), "error", err)
			continue
		}
		e := memberEntry{present: true}
		e.rec, e.err = decodeMember(kv.Value, rank)
		e.member = e.rec.Member
		next[rank] = e
	}
	for rank, old := range g.view {
		if old.present && (!next[rank].present || next[rank].member != old.member) {
			g.dropMember(rank, rev)
		}
	}
	copy(g.view, next)
	g.checkComplete()
}

// checkComplete captures, for a Join in progress, the first view in which
// every rank is present and this rank holds its own key. Called with g.mu
// held, after each event, so a rank that comes and goes between two reads
// is still seen.
func (g *Group) checkComplete() {
	if g.joinSnap != nil || g.mode.Transport == "" {
		return
	}
	for _, e := range g.view {
		if !e.present {
			return
		}
	}
	if g.view[g.cfg.Rank].member != g.member {
		return
	}
	g.joinSnap = append([]memberEntry(nil), g.view...)
	close(g.joinCh)
}

// LostRanks lists every rank loss seen since Open, oldest first.
func (g *Group) LostRanks() []LostRank {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]LostRank(nil), g.lost...)
}

// Live reports, per rank, whether its membership key is present now.
func (g *Group) Live() []bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	live := make([]bool, len(g.view))
	for i, e := range g.view {
		live[i] = e.present
	}
	if g.cfg.Solo() {
		live[0] = !g.closed
	}
	return live
}

// members snapshots the member id of each rank ("" where absent).
func (g *Group) members() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := make([]string, len(g.view))
	for i, e := range g.view {
		m[i] = e.member
	}
	return m
}
