package ledger

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/custody-dev/custody/core"
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
// /custody/peers/<name>, under the publishing host's lease. Ids, pool and
// peer names are path-escaped, so no name can reach into another's keys.
const (
	RootPrefix  = "/custody/"
	PeersPrefix = RootPrefix + "peers/"
)

// Keys names the keys of one engine's group.
type Keys struct {
	// Base is the engine's prefix, which each rank's watch follows.
	Base  string
	lasts string
}

// NewKeys is the key layout of engine.
func NewKeys(engine string) Keys {
	return Keys{Base: RootPrefix + "engines/" + engine + "/", lasts: RootPrefix + "last/" + engine + "/"}
}

// Members is the prefix of the member records; Member one rank's.
func (k Keys) Members() string        { return k.Base + "members/" }
func (k Keys) Member(rank int) string { return k.Members() + strconv.Itoa(rank) }

// Requests is the prefix of the request keys (expiries); Request one
// request's.
func (k Keys) Requests() string         { return k.Base + "req/" }
func (k Keys) Request(id string) string { return k.Requests() + url.PathEscape(id) + "/" }

// Records is the prefix of the states records; Record the key of one.
func (k Keys) Records() string { return k.Base + "states/" }
func (k Keys) Record(r int, member string, seq uint64) string {
	return k.Records() + strconv.Itoa(r) + "/" + url.PathEscape(member) + "/" + strconv.FormatUint(seq, 10)
}

// Last is the key a rank rewrites with each write of its states.
func (k Keys) Last(r int) string { return k.lasts + strconv.Itoa(r) }

// Expiry is the key of the expiry of request id written by rank r.
func (k Keys) Expiry(id string, r int) string {
	return k.Request(id) + "t/" + strconv.Itoa(r)
}

// Poisons is the prefix of the poison records; Poison one pool's.
func (k Keys) Poisons() string           { return k.Base + "poison/" }
func (k Keys) Poison(pool string) string { return k.Poisons() + url.PathEscape(pool) }

// PoolOf is the pool a poison key names (the key itself if it does not
// unescape).
func (k Keys) PoolOf(key string) string {
	pool, err := url.PathUnescape(strings.TrimPrefix(key, k.Poisons()))
	if err != nil {
		return key
	}
	return pool
}

// PeerKey is the directory key of a peer name.
func PeerKey(name string) string { return PeersPrefix + url.PathEscape(name) }

// ParseRank reads a rank from a key segment, refusing anything that is not
// the canonical decimal of a rank of a group of size n.
func ParseRank(s string, n int) (int, error) {
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
	return ParseRank(r, n)
}

// ParseRecordKey splits the part of a states key after states/ into the
// rank, member and sequence number it names, refusing anything that is not
// the canonical form a rank writes.
func ParseRecordKey(rest string, n int) (rank int, member string, seq uint64, err error) {
	parts := strings.Split(rest, "/")
	if len(parts) != 3 {
		return 0, "", 0, fmt.Errorf("states key %.120q is not <rank>/<member>/<seq>", rest)
	}
	if rank, err = ParseRank(parts[0], n); err != nil {
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

// parseRequestID splits a request key into its id and the part after
// req/<id>/.
func (k Keys) parseRequestID(key string) (core.RequestID, string, error) {
	esc, rest, ok := strings.Cut(strings.TrimPrefix(key, k.Requests()), "/")
	if !ok {
		return "", "", fmt.Errorf("no key below the request id")
	}
	id, err := url.PathUnescape(esc)
	if err != nil {
		return "", "", fmt.Errorf("request id %.80q is not path-escaped: %w", esc, err)
	}
	return core.RequestID(id), rest, nil
}
