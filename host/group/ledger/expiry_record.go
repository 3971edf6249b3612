package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/custody-dev/custody/core"
)

// ExpiryTTL is the least time an expiry stays in etcd when a rank it names
// never reports.
const ExpiryTTL = time.Hour

// ExpiryTTLFor is how long the lease of an expiry written after waiting
// waited lasts, in whole seconds: ExpiryTTL, or ten times waited.
func ExpiryTTLFor(waited time.Duration) int64 {
	return int64(max(ExpiryTTL, 10*waited).Round(time.Second) / time.Second)
}

// maxExpiryRecord bounds an expiry record read from etcd.
const maxExpiryRecord = 1024

// Expiry is one expiry record as read: the rank that wrote it and why.
type Expiry struct {
	Rank   int
	Reason string
}

// expiryRecord is what req/<id>/t/<rank> holds.
type expiryRecord struct {
	V       int    `json:"v"`
	Rank    int    `json:"rank"`
	Member  string `json:"member"`
	Pending []int  `json:"pending"`
	Waited  string `json:"waited"`
}

// encodeExpiry is the expiry record rank's member writes after waiting
// waited for the ranks pending.
func encodeExpiry(rank int, member string, pending []int, waited time.Duration) string {
	raw, _ := json.Marshal(expiryRecord{V: Proto, Rank: rank, Member: member, Pending: pending, Waited: waited.Round(time.Millisecond).String()})
	return string(raw)
}

// DecodeExpiry reads an expiry record. A malformed one still expires the
// request, as a timeout of the rank whose key holds it: an expiry fails
// safe.
func DecodeExpiry(id core.RequestID, raw []byte, rank int) Expiry {
	var rec expiryRecord
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if len(raw) > maxExpiryRecord || dec.Decode(&rec) != nil || rec.Rank != rank || rec.V != Proto {
		return Expiry{Rank: rank, Reason: fmt.Sprintf("request %q: rank %d ended the wait past its hold cap (malformed expiry record %.80q: %v)", id, rank, raw, ErrMalformed)}
	}
	return Expiry{Rank: rank, Reason: fmt.Sprintf("request %q: rank %d waited %s past its hold cap for ranks %v that never reported it", id, rank, rec.Waited, rec.Pending)}
}
