package group

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// The key layout. Every key an engine's group writes lives under
// /custody/engines/<engine>/:
//
//	members/<rank>                  member record (mode), under the rank's lease
//	states/<rank>/<member>/<seq>    one write's local terminal states of a rank's
//	                                member (durable; its writer deletes it once
//	                                every rank's state of each of its requests is
//	                                in or expired, the lowest live rank once its
//	                                writer is lost)
//	req/<id>/t/<rank>               a rank ended the wait past the hold cap
//	                                (expire.go; the lowest live rank deletes
//	                                req/<id>/ once every rank's state is in,
//	                                else its lease ends it)
//	poison/<pool>                   a poisoned pool (durable, cleared by an operator)
//
// /custody/last/<engine>/<rank> is rewritten with each write of a rank's
// states: its revision tells an expiry whether the rank wrote since
// (expire.go). It lies outside the engine's prefix, so that no rank's
// watch carries it. Peer addresses, shared by all engines, live under
// /custody/peers/<name>, under the publishing host's lease. Ids, pool and peer names are
// path-escaped, so no name can reach into another's keys.
const (
	rootPrefix  = "/custody/"
	peersPrefix = rootPrefix + "peers/"
)

type keys struct {
	base, lasts string
}

func newKeys(engine string) keys {
	return keys{base: rootPrefix + "engines/" + engine + "/", lasts: rootPrefix + "last/" + engine + "/"}
}

func (k keys) members() string          { return k.base + "members/" }
func (k keys) member(rank int) string   { return k.members() + strconv.Itoa(rank) }
func (k keys) requests() string         { return k.base + "req/" }
func (k keys) request(id string) string { return k.requests() + url.PathEscape(id) + "/" }
func (k keys) batches() string          { return k.base + "states/" }
func (k keys) batch(r int, member string, seq uint64) string {
	return k.batches() + strconv.Itoa(r) + "/" + url.PathEscape(member) + "/" + strconv.FormatUint(seq, 10)
}
func (k keys) last(r int) string { return k.lasts + strconv.Itoa(r) }
func (k keys) expiry(id string, r int) string {
	return k.request(id) + "t/" + strconv.Itoa(r)
}
func (k keys) poisons() string           { return k.base + "poison/" }
func (k keys) poison(pool string) string { return k.poisons() + url.PathEscape(pool) }

func peerKey(name string) string { return peersPrefix + url.PathEscape(name) }

// parseRank reads a rank from a key segment, refusing anything that is not
// the canonical decimal of a rank of a group of size n.
func parseRank(s string, n int) (int, error) {
	r, err := strconv.Atoi(s)
	if err != nil || r < 0 || r >= n || strconv.Itoa(r) != s {
		return 0, fmt.Errorf("%q is not a rank of a group of %d", s, n)
	}
	return r, nil
}

// parseRequestKey reads the rank of the part of a request key after
// req/<id>/: only expiries (t/<rank>) live there.
func parseRequestKey(rest string, n int) (rank int, err error) {
	k, r, ok := strings.Cut(rest, "/")
	if !ok || k != "t" {
		return 0, fmt.Errorf("unexpected key suffix %.80q", rest)
	}
	return parseRank(r, n)
}

// parseBatchKey splits the part of a states key after states/ into the
// rank, member and sequence number it names, refusing anything that is not
// the canonical form a rank writes.
func parseBatchKey(rest string, n int) (rank int, member string, seq uint64, err error) {
	parts := strings.Split(rest, "/")
	if len(parts) != 3 {
		return 0, "", 0, fmt.Errorf("states key %.120q is not <rank>/<member>/<seq>", rest)
	}
	if rank, err = parseRank(parts[0], n); err != nil {
		return 0, "", 0, err
	}
	if member, err = url.PathUnescape(parts[1]); err != nil || member == "" || len(member) > maxMemberLen || url.PathEscape(member) != parts[1] {
		return 0, "", 0, fmt.Errorf("states key %.120q: member %.80q is not a path-escaped member id", rest, parts[1])
	}
	seq, err = strconv.ParseUint(parts[2], 10, 64)
	if err != nil || seq == 0 || strconv.FormatUint(seq, 10) != parts[2] {
		return 0, "", 0, fmt.Errorf("states key %.120q: %.30q is not a sequence number", rest, parts[2])
	}
	return rank, member, seq, nil
}
