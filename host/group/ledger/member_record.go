package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// MaxMemberRecord bounds a member record read from etcd.
const MaxMemberRecord = 64 << 10

// memberRecord is what a rank publishes under its lease at Join.
type memberRecord struct {
	Proto  int    `json:"proto"`
	Engine string `json:"engine"`
	Rank   int    `json:"rank"`
	Size   int    `json:"size"`
	Member string `json:"member"`
	Mode   Mode   `json:"mode"`
}

// decodeMember validates a member record read from key rank.
func decodeMember(raw []byte, rank int) (memberRecord, error) {
	var rec memberRecord
	if len(raw) > MaxMemberRecord {
		return rec, fmt.Errorf("rank %d's member record is %d bytes, over the %d limit: %w", rank, len(raw), MaxMemberRecord, ErrMalformed)
	}
	var head struct {
		Proto int `json:"proto"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return rec, fmt.Errorf("rank %d's member record does not decode: %v: %w", rank, err, ErrMalformed)
	}
	if head.Proto != Proto {
		return rec, fmt.Errorf("rank %d speaks group protocol %d, this rank %d: %w; run the same custody version on every rank", rank, head.Proto, Proto, ErrMixedContract)
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
