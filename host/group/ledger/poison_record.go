package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

// maxPoisonRecord bounds a poison record read from etcd.
const maxPoisonRecord = 4096

// PoisonRecord is a pool poisoned on every rank (rule 11): a block
// of it could not be proven safe on some rank, so no rank may hand out its
// blocks again until an operator clears it.
type PoisonRecord struct {
	Pool   string    `json:"pool"`
	Reason string    `json:"reason"`
	Rank   int       `json:"rank"`
	Member string    `json:"member"`
	At     time.Time `json:"at"`
}

// DecodePoison reads a poison record. A malformed one still poisons its
// pool: poison fails safe.
func DecodePoison(pool string, raw []byte) PoisonRecord {
	var rec PoisonRecord
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if len(raw) > maxPoisonRecord {
		return PoisonRecord{Pool: pool, Rank: -1, Reason: fmt.Sprintf("poison record of %d bytes, over the %d limit (%v); the pool stays poisoned", len(raw), maxPoisonRecord, ErrMalformed)}
	}
	if err := dec.Decode(&rec); err != nil || rec.Pool != pool {
		return PoisonRecord{Pool: pool, Rank: -1, Reason: fmt.Sprintf("malformed poison record (%v, %.80q); the pool stays poisoned", ErrMalformed, raw)}
	}
	return rec
}

// CheckPoolName refuses a pool name no rank could store.
func CheckPoolName(pool string) error {
	if pool == "" || len(pool) > MaxNameLen || !utf8.ValidString(pool) {
		return fmt.Errorf("pool name %.40q: want 1-%d bytes of UTF-8: %w", pool, MaxNameLen, ErrBadArgument)
	}
	return nil
}
