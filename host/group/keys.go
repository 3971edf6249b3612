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
//	members/<rank>            member record (mode), under the rank's lease
//	req/<id>/s/<rank>         a rank's local terminal state of a request (durable;
//	                          the lowest live rank deletes req/<id>/ once every
//	                          rank's state is in)
//	req/<id>/t/<rank>         a rank ended the wait past the hold cap (expire.go)
//	poison/<pool>             a poisoned pool (durable, cleared by an operator)
//
// and peer addresses, shared by all engines, under /custody/peers/<name>,
// under the publishing host's lease. Ids, pool and peer names are
// path-escaped, so no name can reach into another's keys.
const (
	rootPrefix  = "/custody/"
	peersPrefix = rootPrefix + "peers/"
)

type keys struct {
	base string
}

func newKeys(engine string) keys { return keys{base: rootPrefix + "engines/" + engine + "/"} }

func (k keys) members() string               { return k.base + "members/" }
func (k keys) member(rank int) string        { return k.members() + strconv.Itoa(rank) }
func (k keys) requests() string              { return k.base + "req/" }
func (k keys) request(id string) string      { return k.requests() + url.PathEscape(id) + "/" }
func (k keys) state(id string, r int) string { return k.request(id) + "s/" + strconv.Itoa(r) }
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

// parseRequestKey splits the part of a request key after req/<id>/ into its
// kind ('s' or 't') and rank.
func parseRequestKey(rest string, n int) (kind byte, rank int, err error) {
	k, r, ok := strings.Cut(rest, "/")
	if !ok || (k != "s" && k != "t") {
		return 0, 0, fmt.Errorf("unexpected key suffix %q", rest)
	}
	rank, err = parseRank(r, n)
	return k[0], rank, err
}
