package ring

import (
	"errors"
	"fmt"
)

// One ring's single-producer, single-consumer queue: the producer reserves
// and publishes entries, the consumer reads and advances past them
// (doc.go: Queues, Trust).

// errFull says the producer must wait for the consumer.
var errFull = errors.New("ring full")

// producer is the writing side of one ring. Its fields are private to this
// process; nothing in it is read back from the mapping but head, which is
// checked.
type producer struct {
	r      ringMem
	name   string
	tail   uint64   // entries published
	apos   uint64   // arena bytes allocated (monotonic)
	starts []uint64 // arena position of each live entry, by slot
}

func newProducer(r ringMem, name string) *producer {
	return &producer{r: r, name: name, starts: make([]uint64, r.n)}
}

// reserve finds room for one entry with n arena bytes. It returns the
// entry's bytes and its arena bytes (both to be filled before publish), or
// errFull, or a violation when the consumer's head makes no sense.
func (p *producer) reserve(n int) (ent, arena []byte, arenaOff uint32, err error) {
	head := p.r.head.Load()
	if head > p.tail || p.tail-head > p.r.n {
		return nil, nil, 0, violationf("%s ring: consumer head %d outside [%d, %d]", p.name, head, p.tail-min(p.tail, p.r.n), p.tail)
	}
	if p.tail-head == p.r.n {
		return nil, nil, 0, errFull
	}
	freed := p.apos
	if head < p.tail {
		freed = p.starts[head%p.r.n]
	}
	size := uint64(len(p.r.arena))
	if uint64(n) > size {
		return nil, nil, 0, fmt.Errorf("%s ring: %d arena bytes exceed the arena (%d)", p.name, n, size)
	}
	pos := p.apos
	off := pos % size
	if off+uint64(n) > size {
		pos += size - off
		off = 0
	}
	if pos+uint64(n)-freed > size {
		return nil, nil, 0, errFull
	}
	p.starts[p.tail%p.r.n] = p.apos
	p.apos = pos + uint64(n)
	slot := p.tail % p.r.n
	ent = p.r.ents[slot*entrySize : (slot+1)*entrySize]
	return ent, p.r.arena[off : off+uint64(n)], uint32(off), nil
}

// publish makes the entry reserved last visible to the consumer.
func (p *producer) publish() {
	p.tail++
	p.r.tail.Store(p.tail)
}

// consumer is the reading side of one ring.
type consumer struct {
	r    ringMem
	name string
	head uint64 // entries consumed
	buf  []byte // arena bytes of the entry read last, copied out
}

func newConsumer(r ringMem, name string) *consumer {
	return &consumer{r: r, name: name}
}

// available is how many entries wait, or a violation when the producer's
// tail makes no sense.
func (c *consumer) available() (uint64, error) {
	tail := c.r.tail.Load()
	if tail < c.head || tail-c.head > c.r.n {
		return 0, violationf("%s ring: producer tail %d outside [%d, %d]", c.name, tail, c.head, c.head+c.r.n)
	}
	return tail - c.head, nil
}

// next reads the entry at head and copies its arena bytes out; the entry
// stays unconsumed until advance. The returned bytes are valid until the
// next call.
func (c *consumer) next() (entry, []byte, error) {
	slot := c.head % c.r.n
	var e entry
	e.decode(c.r.ents[slot*entrySize : (slot+1)*entrySize])
	if e.seq != c.head {
		return e, nil, violationf("%s ring: entry %d carries sequence number %d", c.name, c.head, e.seq)
	}
	size := uint64(len(c.r.arena))
	if uint64(e.arenaOff)+uint64(e.arenaLen) > size {
		return e, nil, violationf("%s ring: entry %d: arena range [%d, +%d) outside the arena (%d bytes)", c.name, c.head, e.arenaOff, e.arenaLen, size)
	}
	c.buf = append(c.buf[:0], c.r.arena[e.arenaOff:e.arenaOff+e.arenaLen]...)
	return e, c.buf, nil
}

// advance consumes the entry next returned, handing its slot and arena
// bytes back.
func (c *consumer) advance() {
	c.head++
	c.r.head.Store(c.head)
}
