package host

import (
	"fmt"
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/custody-dev/custody/core"
)

// Finished is a finished report as the engine sees it: what finished,
// failed, or came back invalid or quarantined.
type Finished struct {
	FinishedSending   []core.RequestID
	FinishedReceiving []core.RequestID
	Failed            []core.Failure
	InvalidBlocks     []core.BlockRef
	Quarantined       []core.BlockRef
}

// Batch is a run of the host's report log: the items at positions
// [Cursor, Next). More is set when the run ends inside a round that was too
// large for one batch; the round's rest follows at Next.
type Batch struct {
	Finished
	// Reasons holds each failure's reason as sent to the engine (bounded by
	// maxReasonBytes), index for index with Failed.
	Reasons      []string
	Cursor, Next uint64
	More         bool
}

// Bounds of a batch on the wire. Every item fits in minBatchBytes: request
// ids are at most maxRequestIDBytes (the engine API refuses longer ones) and
// a failure's reason is cut to maxReasonBytes.
const (
	// DefaultBatchBytes bounds a batch when the engine names no limit: a
	// quarter of gRPC's default 4 MiB receive limit.
	DefaultBatchBytes = 1 << 20
	// MinBatchBytes is the least limit an engine may ask for.
	MinBatchBytes     = 16 << 10
	maxRequestIDBytes = 1024
	maxReasonBytes    = 1024
	// batchOverhead is what cursor, next and more add to a batch at most.
	batchOverhead = 2*(1+10) + 2 // two varints of at most 10 bytes, a bool
)

type itemKind uint8

const (
	itemSent itemKind = iota
	itemRecv
	itemFailed
	itemInvalid
	itemQuarantined
)

// item is one entry of the report log.
type item struct {
	kind    itemKind
	req     core.RequestID
	sending bool
	reason  string // bounded by maxReasonBytes
	err     error  // the full reason, for the Go API
	block   core.BlockRef
	// endsRound marks the last item of a round's report: a batch that
	// ends here ends on a round boundary.
	endsRound bool
	// wire is the bytes the item adds to an enginev1.Finished.
	wire int
}

// outbox is the host's report log: what core reported, item by item, each
// at a fixed position, kept until the engine acknowledges it. It is safe for
// concurrent use: the owner adds rounds, the engine API reads and
// acknowledges, and neither waits for the other's transport work.
//
// The positions make delivery exactly once on the engine's side: an item
// has one position for the host's life; a batch is [Cursor, Next); an
// engine that processed a batch acknowledges Next, and a stream opened at
// the engine's cursor resumes exactly there, so nothing it processed comes
// again and nothing it did not is lost.
type outbox struct {
	mu    sync.Mutex
	base  uint64 // position of items[0]; everything below is acknowledged
	items []item
	// grew is closed (and replaced) whenever items are added, waking the
	// streams that wait on it; shrank likewise whenever items are
	// acknowledged. An acknowledgement gives no stream anything to send,
	// so it wakes none: one wake-up less per report.
	grew, shrank chan struct{}
}

// add appends a round's report as one round of items. It is the owner's
// hook: called for every round, it wakes every waiting stream.
func (o *outbox) add(rd core.Ready) {
	n := len(rd.FinishedSending) + len(rd.FinishedReceiving) + len(rd.Failed) + len(rd.InvalidBlocks) + len(rd.Quarantined)
	if n == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range rd.FinishedSending {
		o.items = append(o.items, item{kind: itemSent, req: id, wire: stringWire(string(id))})
	}
	for _, id := range rd.FinishedReceiving {
		o.items = append(o.items, item{kind: itemRecv, req: id, wire: stringWire(string(id))})
	}
	for _, f := range rd.Failed {
		o.items = append(o.items, failureItem(f))
	}
	for _, b := range rd.InvalidBlocks {
		o.items = append(o.items, item{kind: itemInvalid, block: b, wire: blockWire(b)})
	}
	for _, b := range rd.Quarantined {
		o.items = append(o.items, item{kind: itemQuarantined, block: b, wire: blockWire(b)})
	}
	o.items[len(o.items)-1].endsRound = true
	wake(&o.grew)
}

func failureItem(f core.Failure) item {
	reason := ""
	if f.Reason != nil {
		reason = truncate(f.Reason.Error(), maxReasonBytes)
	}
	it := item{kind: itemFailed, req: f.Request, sending: f.Sending, reason: reason, err: f.Reason}
	// A Failure message: request_id, sending, reason.
	fw := stringWire(string(f.Request)) + stringWire(reason)
	if f.Sending {
		fw += 2
	}
	it.wire = 1 + protowire.SizeBytes(fw)
	if !f.Sending {
		// vLLM lists a failed receive in finished_recving too.
		it.wire += stringWire(string(f.Request))
	}
	return it
}

// stringWire is the size of a string in a repeated string field (or a
// string field) numbered below 16.
func stringWire(s string) int { return 1 + protowire.SizeBytes(len(s)) }

func blockWire(b core.BlockRef) int {
	n := 0
	if b.Pool != 0 {
		n += 1 + protowire.SizeVarint(uint64(b.Pool))
	}
	if b.Block != 0 {
		n += 1 + protowire.SizeVarint(uint64(b.Block))
	}
	return 1 + protowire.SizeBytes(n)
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n-len("…")]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// wake wakes everyone waiting on *ch. Call with mu held.
func wake(ch *chan struct{}) {
	if *ch != nil {
		close(*ch)
		*ch = nil
	}
}

// waitOn returns *ch, made if nobody waits yet. Call with mu held.
func waitOn(ch *chan struct{}) <-chan struct{} {
	if *ch == nil {
		*ch = make(chan struct{})
	}
	return *ch
}

// end is the position after the last item. Call with mu held.
func (o *outbox) end() uint64 { return o.base + uint64(len(o.items)) }

// ack removes every item below cursor: the engine processed them. A cursor
// at or below what is already acknowledged changes nothing; one past the
// log's end was never issued and is refused.
func (o *outbox) ack(cursor uint64) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ackLocked(cursor)
}

func (o *outbox) ackLocked(cursor uint64) error {
	if cursor > o.end() {
		return fmt.Errorf("acknowledge finished reports up to cursor %d: the host issued cursors up to %d only (a cursor from an earlier host process? start again from 0)", cursor, o.end())
	}
	if cursor <= o.base {
		return nil
	}
	n := int(cursor - o.base)
	clear(o.items[:n])
	o.items = o.items[n:]
	o.base = cursor
	wake(&o.shrank)
	return nil
}

// next returns the batch that starts at from (or at the acknowledged
// position, if that is later) and fits in limit bytes, or, when no item is
// there yet, a channel closed once items are added.
func (o *outbox) next(from uint64, limit int) (Batch, bool, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if from < o.base {
		from = o.base
	}
	if from >= o.end() {
		return Batch{}, false, waitOn(&o.grew)
	}
	return o.cut(from, limit), true, nil
}

// take returns the batch at the acknowledged position that fits in limit
// bytes (limit <= 0: everything) and acknowledges it: GetFinished's
// implicit acknowledgement.
func (o *outbox) take(limit int) Batch {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.base == o.end() {
		return Batch{Cursor: o.base, Next: o.base}
	}
	b := o.cut(o.base, limit)
	_ = o.ackLocked(b.Next) // b.Next <= end
	return b
}

// cut builds the batch that starts at from (base <= from < end): whole
// rounds while they fit in limit (limit <= 0: no bound); when the first
// round alone does not fit, as much of it as fits, with More set. A batch
// always holds at least one item. Call with mu held.
func (o *outbox) cut(from uint64, limit int) Batch {
	items := o.items[from-o.base:]
	stop, lastRound := 0, 0
	size := batchOverhead
	for i, it := range items {
		if limit > 0 && size+it.wire > limit && i > 0 {
			break
		}
		size += it.wire
		stop = i + 1
		if it.endsRound {
			lastRound = stop
		}
	}
	more := false
	if lastRound > 0 {
		stop = lastRound
	} else {
		more = true // the round goes on past what fits
	}
	b := Batch{Cursor: from, Next: from + uint64(stop), More: more}
	for _, it := range items[:stop] {
		switch it.kind {
		case itemSent:
			b.FinishedSending = append(b.FinishedSending, it.req)
		case itemRecv:
			b.FinishedReceiving = append(b.FinishedReceiving, it.req)
		case itemFailed:
			b.Failed = append(b.Failed, core.Failure{Request: it.req, Sending: it.sending, Reason: it.err})
			b.Reasons = append(b.Reasons, it.reason)
		case itemInvalid:
			b.InvalidBlocks = append(b.InvalidBlocks, it.block)
		case itemQuarantined:
			b.Quarantined = append(b.Quarantined, it.block)
		}
	}
	return b
}
