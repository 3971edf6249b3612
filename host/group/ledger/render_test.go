package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// rel is a key relative to the engine's prefix (last/<r> for the lasts).
func (g *rig) rel(key string) string {
	if rest, ok := strings.CutPrefix(key, g.keys.lasts); ok {
		return "last/" + rest
	}
	return strings.TrimPrefix(key, g.keys.Base)
}

func (g *rig) renderTxn(t Txn) string {
	var ifs, thens []string
	for _, c := range t.If {
		switch c.Target {
		case CmpLease:
			ifs = append(ifs, fmt.Sprintf("lease(%s)%s%d", g.rel(c.Key), c.Op, c.Value))
		case CmpCreated:
			ifs = append(ifs, fmt.Sprintf("created(%s)%s%d", g.rel(c.Key), c.Op, c.Value))
		case CmpModified:
			ifs = append(ifs, fmt.Sprintf("modified(%s)%s%d", g.rel(c.Key), c.Op, c.Value))
		}
	}
	for _, o := range t.Then {
		thens = append(thens, g.renderOp(o))
	}
	s := "then " + strings.Join(thens, " ")
	if len(ifs) > 0 {
		s = "if " + strings.Join(ifs, " ") + " " + s
	}
	return s
}

func (g *rig) renderOp(o Op) string {
	key := g.rel(o.Key)
	if o.Prefix {
		key += "*"
	}
	switch o.Kind {
	case OpPut:
		lease := ""
		if o.Lease != 0 {
			lease = fmt.Sprintf(" lease %d", o.Lease)
		}
		return fmt.Sprintf("put(%s %s%s)", key, g.renderValue(o.Key, []byte(o.Value)), lease)
	case OpDelete:
		return "del(" + key + ")"
	}
	return "get(" + key + ")"
}

func (g *rig) renderResult(res Result) string {
	if res.Succeeded {
		return fmt.Sprintf("ok @%d", res.Rev)
	}
	var got []string
	for _, kvs := range res.Ranges {
		if len(kvs) == 0 {
			got = append(got, "none")
		}
		for _, kv := range kvs {
			got = append(got, fmt.Sprintf("%s lease %d", g.rel(kv.Key), kv.Lease))
		}
	}
	return fmt.Sprintf("refused @%d, read [%s]", res.Rev, strings.Join(got, ", "))
}

// renderValue is a value as the key's kind of record reads.
func (g *rig) renderValue(key string, raw []byte) string {
	k := g.keys
	switch {
	case strings.HasPrefix(key, k.Records()):
		rank, member, _, err := ParseRecordKey(strings.TrimPrefix(key, k.Records()), len(g.ranks))
		if err == nil {
			if entries, err := DecodeStates(raw, rank, member); err == nil {
				var s []string
				for _, e := range entries {
					s = append(s, string(e.ID)+":"+e.State.String())
				}
				return "[" + strings.Join(s, " ") + "]"
			}
		}
	case strings.HasPrefix(key, k.Members()):
		var rec memberRecord
		if json.Unmarshal(raw, &rec) == nil && rec.Member != "" {
			return "member " + rec.Member
		}
	case strings.HasPrefix(key, k.Requests()):
		var rec expiryRecord
		if json.Unmarshal(raw, &rec) == nil && rec.V == Proto {
			return fmt.Sprintf("expiry by %s of %v after %s", rec.Member, rec.Pending, rec.Waited)
		}
	case strings.HasPrefix(key, k.Poisons()):
		var rec PoisonRecord
		if json.Unmarshal(raw, &rec) == nil {
			return fmt.Sprintf("poison by r%d: %s", rec.Rank, rec.Reason)
		}
	case strings.HasPrefix(key, k.lasts):
		return string(raw)
	}
	return fmt.Sprintf("%.60q", raw)
}

func renderOutcome(o Outcome) string {
	ranks := make([]string, len(o.Ranks))
	for i, s := range o.Ranks {
		ranks[i] = "-"
		if s != 0 {
			ranks[i] = s.String()
		}
	}
	if !o.Resolved {
		return fmt.Sprintf("%s: pending on %v [%s]", o.Request, o.Pending, strings.Join(ranks, " "))
	}
	if o.State == Succeeded {
		return fmt.Sprintf("%s: succeeded [%s]", o.Request, strings.Join(ranks, " "))
	}
	s := fmt.Sprintf("%s: %s by rank %d [%s]", o.Request, o.State, o.Rank, strings.Join(ranks, " "))
	if o.Reason != "" {
		s += ": " + o.Reason
	}
	return s
}

// book renders what rank r tracks: each request's phase (and whether its
// state is unwritten), its states records, what it collects; with view,
// what its view holds.
func (g *rig) book(r *srank, view bool) []string {
	b := &r.l.book
	var reqs, recs []string
	for _, id := range sortedKeys(b.reqs) {
		q := b.reqs[id]
		s := string(id) + " " + q.phase.String()
		if !q.written() && !r.l.solo() {
			s += " (unwritten)"
		}
		reqs = append(reqs, s)
	}
	for _, key := range sortedKeys(b.records) {
		rec := b.records[key]
		s := fmt.Sprintf("%d", rec.seq)
		if !rec.written {
			s += " unwritten"
		}
		if rec.due {
			s += " due"
		} else {
			s += fmt.Sprintf(" %d left", rec.left)
		}
		recs = append(recs, s)
	}
	out := []string{fmt.Sprintf("r%d book: %s", r.n, orNone(reqs, "; "))}
	if len(recs) > 0 {
		out = append(out, fmt.Sprintf("r%d records: %s", r.n, strings.Join(recs, "; ")))
	}
	if len(b.collect) > 0 {
		var keys []string
		for _, k := range sortedKeys(b.collect) {
			keys = append(keys, g.rel(k))
		}
		out = append(out, fmt.Sprintf("r%d collects: %s", r.n, strings.Join(keys, ", ")))
	}
	if view {
		v := &r.l.view
		var ids []string
		for _, id := range sortedKeys(v.reqs) {
			s := string(id)
			if v.reqs[id].gone {
				s += " (gone)"
			}
			ids = append(ids, s)
		}
		var orphans []string
		for _, k := range sortedKeys(v.orphans) {
			orphans = append(orphans, g.rel(k))
		}
		out = append(out, fmt.Sprintf("r%d view: rev %d, requests %s, foreign records %d, orphans %s", r.n, v.rev, orNone(ids, " "), len(v.records), orNone(orphans, " ")))
		st := r.l.Stats()
		out = append(out, fmt.Sprintf("r%d stats: in flight %d, unwritten %d", r.n, st.InFlight, st.Unwritten))
	}
	return out
}

func orNone(s []string, sep string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, sep)
}

// dump lists the store's keys with their values and leases.
func (g *rig) dump() []string {
	var out []string
	for _, key := range sortedKeys(g.s.kvs) {
		kv := g.s.kvs[key]
		lease := ""
		if kv.lease != 0 {
			lease = fmt.Sprintf(" (lease %d)", kv.lease)
		}
		out = append(out, fmt.Sprintf("%s = %s%s", g.rel(key), g.renderValue(key, []byte(kv.value)), lease))
	}
	return append(out, fmt.Sprintf("rev %d", g.s.rev))
}

// sentinels names the ledger's sentinel errors err matches.
var sentinels = []struct {
	name string
	err  error
}{
	{"ModeMismatch", ErrModeMismatch}, {"MixedContract", ErrMixedContract}, {"DuplicateRank", ErrDuplicateRank},
	{"SessionLost", ErrSessionLost}, {"Coordinator", ErrCoordinator}, {"UnknownRequest", ErrUnknownRequest},
	{"BadRequestID", ErrBadRequestID}, {"AlreadyReported", ErrAlreadyReported}, {"Malformed", ErrMalformed},
	{"BadArgument", ErrBadArgument},
}

// renderErr is an error as scripts show it: the sentinels it matches, then
// its text on one line.
func renderErr(err error) string {
	var names []string
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			names = append(names, s.name)
		}
	}
	return fmt.Sprintf("error %v: %s", names, strings.ReplaceAll(err.Error(), "\n", " | "))
}
