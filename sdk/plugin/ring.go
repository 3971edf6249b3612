package plugin

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/sdk"
)

// The rings: how Post, Release, SendNotifications and completions cross between the host and a
// transport process without gRPC.
//
// After a successful Open the host creates a file (0600, in a private 0700
// directory under /dev/shm), maps it shared, writes its header, and names
// it to the plugin in one AttachRings call. The plugin checks the file (a
// regular file of this user, mode 0600, of the size its header states),
// maps it and answers; the host then unlinks it, so that only the two
// mappings remain. A plugin that does not offer rings answers UNIMPLEMENTED
// and every call stays on gRPC.
//
// The mapping holds two rings, each single producer and single consumer:
//
//   - the submission ring (host -> plugin) carries calls: Post, Release,
//     SendNotifications, Drain (fetch the transport's events or
//     notifications now), Detach;
//   - the completion ring (plugin -> host) carries their results, in the
//     order the calls were submitted, and what the plugin pushes on its
//     own: events, terminal states it polled, notifications, wake-ups.
//
// Each ring is an array of fixed 64-byte entries (ringEntry) and an arena
// of bytes for the variable part of each entry (index lists, notification
// bytes, messages). Counters are 64-bit and only grow:
//
//	tail  the producer's count of entries published; written by the producer
//	head  the consumer's count of entries consumed; written by the consumer
//
// The producer writes entry tail%n and its arena bytes, then stores
// tail+1; the consumer loads tail, reads entries head..tail-1, copies each
// one's arena bytes out, and stores head. Go's sync/atomic operations are
// sequentially consistent, so a store of tail publishes the entry and arena
// bytes written before it (release), and a load of tail makes them visible
// to the reads after it (acquire); likewise head hands slots and arena
// bytes back to the producer. Arena bytes are allocated in entry order from
// a circular buffer: an entry's bytes are contiguous (the producer skips
// the arena's end when they would wrap), and they are free again once the
// consumer's head has passed that entry. Which bytes are free the producer
// computes from its own private records, never from anything the peer
// wrote.
//
// Everything read from the mapping is the peer's word and is checked
// before use: head and tail must stay within one ring of each other, an
// entry's sequence number must equal its index, its kind, counts and arena
// range must make sense, and its arena bytes are copied out before they are
// decoded, so a peer that scribbles over the mapping meanwhile can make a
// decode fail but never read out of bounds. A violation is a ringError; the
// host then fences the transport (kills it), the plugin stops serving the
// rings.
//
// Sleeping: each side has a doorbell, a 32-bit futex word and a sleeping
// flag in the mapping. A side with nothing to do spins a little (adapting
// the spin to how often it pays), then sets its sleeping flag, loads its
// word, checks the rings once more and waits on the word (FUTEX_WAIT on the
// shared mapping). A producer that has published, or a consumer that has
// freed space, loads the peer's sleeping flag after its own store and, when
// set, increments the peer's word and wakes it (FUTEX_WAKE). Both sides'
// store-then-load are sequentially consistent, so either the sleeper sees
// the new entries on its last check, or the waker sees the flag; and the
// kernel's FUTEX_WAIT returns at once if the word moved since it was
// loaded. Nothing spins while idle.
//
// Release at terminal (LaunchOptions.ReleaseTerminal; AttachRings asks, the
// plugin answers that it took it): the plugin releases each handle it
// follows as soon as it finds the handle terminal, before the state goes
// out, and each event and state it pushes carries one more byte, 1 when it
// released the handle. The host answers its own Release of such a handle
// from that record, without crossing to the process, and its Cancel of
// such a handle as the transport would for a terminal one (OK); a handle
// whose release failed in the plugin (byte 0) is released through the
// rings as before. A terminal state is final, so releasing at once frees nothing
// that may still be touched, and the host still holds the handle's blocks
// until its own Release returns. It saves one round trip between the
// processes per transfer. A plugin that says released for a handle it
// reports not terminal, or a byte other than 0 or 1, breaks the protocol.
// A Post that returns the id of a handle the host still holds (released or
// not) breaks the contract, and the host fences: the record of the old
// handle would answer for the new transfer.

// ringVersion is the layout version; a plugin refuses any other.
const ringVersion = 2

// ringMagic starts the header of a ring file.
const ringMagic uint64 = 0x31474e4952594443 // "CDYRING1"

// Header offsets. Counters the two sides write sit on separate cache
// lines.
const (
	offMagic       = 0
	offVersion     = 8
	offSubEntries  = 16
	offCompEntries = 20
	offSubArena    = 24
	offCompArena   = 32
	offSubTail     = 64  // host writes
	offSubHead     = 128 // plugin writes
	offCompTail    = 192 // plugin writes
	offCompHead    = 256 // host writes
	offPluginBell  = 320 // word, sleeping flag, cpu
	offHostBell    = 384 // word, sleeping flag, cpu
	ringHeaderSize = 4096
)

// ringEntrySize is the size of one entry of either ring.
const ringEntrySize = 64

// Default ring sizes. The arenas are sized so that a Post of thousands of
// transfers with their index lists fits in one entry; tmpfs backs a page
// only once it is touched.
const (
	defaultSubEntries  = 1024
	defaultCompEntries = 4096
	defaultSubArena    = 4 << 20
	defaultCompArena   = 4 << 20
	maxRingEntries     = 1 << 16
	maxRingArena       = 64 << 20
)

// ringLayout is the size of each part of a mapping.
type ringLayout struct {
	subEntries, compEntries uint32
	subArena, compArena     uint64
}

var defaultRingLayout = ringLayout{defaultSubEntries, defaultCompEntries, defaultSubArena, defaultCompArena}

// size is the mapping's size in bytes.
func (l ringLayout) size() int {
	return ringHeaderSize + int(l.subEntries+l.compEntries)*ringEntrySize + int(l.subArena+l.compArena)
}

func (l ringLayout) validate() error {
	switch {
	case l.subEntries == 0 || l.subEntries > maxRingEntries || l.compEntries == 0 || l.compEntries > maxRingEntries:
		return fmt.Errorf("ring entries %d/%d outside [1, %d]", l.subEntries, l.compEntries, maxRingEntries)
	case l.subArena < 4096 || l.subArena > maxRingArena || l.compArena < 4096 || l.compArena > maxRingArena:
		return fmt.Errorf("ring arenas %d/%d outside [4096, %d]", l.subArena, l.compArena, maxRingArena)
	}
	return nil
}

// ringMap is one side's view of the mapping.
type ringMap struct {
	mem    []byte
	layout ringLayout
	sub    ringMem
	comp   ringMem
	// plugin and host are the two doorbells.
	plugin, host doorbell
}

// ringMem is one ring inside the mapping.
type ringMem struct {
	ents       []byte
	arena      []byte
	n          uint64
	tail, head *atomic.Uint64
}

func u64At(mem []byte, off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&mem[off]))
}

func u32At(mem []byte, off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&mem[off]))
}

// writeRingHeader writes the header of a new mapping.
func writeRingHeader(mem []byte, l ringLayout) {
	binary.LittleEndian.PutUint64(mem[offMagic:], ringMagic)
	binary.LittleEndian.PutUint32(mem[offVersion:], ringVersion)
	binary.LittleEndian.PutUint32(mem[offSubEntries:], l.subEntries)
	binary.LittleEndian.PutUint32(mem[offCompEntries:], l.compEntries)
	binary.LittleEndian.PutUint64(mem[offSubArena:], l.subArena)
	binary.LittleEndian.PutUint64(mem[offCompArena:], l.compArena)
}

// readRingHeader checks the header of a mapping of size bytes and returns
// its layout.
func readRingHeader(mem []byte) (ringLayout, error) {
	if len(mem) < ringHeaderSize {
		return ringLayout{}, fmt.Errorf("ring file of %d bytes is shorter than its header (%d)", len(mem), ringHeaderSize)
	}
	if m := binary.LittleEndian.Uint64(mem[offMagic:]); m != ringMagic {
		return ringLayout{}, fmt.Errorf("ring file magic %#x, want %#x: not a ring file", m, ringMagic)
	}
	if v := binary.LittleEndian.Uint32(mem[offVersion:]); v != ringVersion {
		return ringLayout{}, fmt.Errorf("ring layout version %d, this side speaks %d", v, ringVersion)
	}
	l := ringLayout{
		subEntries:  binary.LittleEndian.Uint32(mem[offSubEntries:]),
		compEntries: binary.LittleEndian.Uint32(mem[offCompEntries:]),
		subArena:    binary.LittleEndian.Uint64(mem[offSubArena:]),
		compArena:   binary.LittleEndian.Uint64(mem[offCompArena:]),
	}
	if err := l.validate(); err != nil {
		return ringLayout{}, err
	}
	if l.size() != len(mem) {
		return ringLayout{}, fmt.Errorf("ring file is %d bytes, its header states %d", len(mem), l.size())
	}
	return l, nil
}

// newRingMap views mem (whose header is valid for l) as rings.
func newRingMap(mem []byte, l ringLayout) *ringMap {
	off := ringHeaderSize
	take := func(n int) []byte {
		b := mem[off : off+n : off+n]
		off += n
		return b
	}
	m := &ringMap{mem: mem, layout: l}
	m.sub = ringMem{ents: take(int(l.subEntries) * ringEntrySize), n: uint64(l.subEntries), tail: u64At(mem, offSubTail), head: u64At(mem, offSubHead)}
	m.comp = ringMem{ents: take(int(l.compEntries) * ringEntrySize), n: uint64(l.compEntries), tail: u64At(mem, offCompTail), head: u64At(mem, offCompHead)}
	m.sub.arena = take(int(l.subArena))
	m.comp.arena = take(int(l.compArena))
	m.plugin = doorbell{word: u32At(mem, offPluginBell), sleeping: u32At(mem, offPluginBell+4), cpu: u32At(mem, offPluginBell+8)}
	m.host = doorbell{word: u32At(mem, offHostBell), sleeping: u32At(mem, offHostBell+4), cpu: u32At(mem, offHostBell+8)}
	return m
}

// ringError is a violation of the ring protocol by the peer (or a
// corrupted mapping): what was wrong, where.
type ringError struct{ msg string }

func (e *ringError) Error() string { return "ring protocol violation: " + e.msg }

func ringErrorf(format string, args ...any) error {
	return &ringError{msg: fmt.Sprintf(format, args...)}
}

// isNotFound reports whether err is the contract's NOT_FOUND.
func isNotFound(err error) bool { return sdk.CodeOf(err) == sdk.CodeNotFound }

// errRingFull says the producer must wait for the consumer.
var errRingFull = errors.New("ring full")

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
// errRingFull, or a ringError when the consumer's head makes no sense.
func (p *producer) reserve(n int) (ent, arena []byte, arenaOff uint32, err error) {
	head := p.r.head.Load()
	if head > p.tail || p.tail-head > p.r.n {
		return nil, nil, 0, ringErrorf("%s ring: consumer head %d outside [%d, %d]", p.name, head, p.tail-min(p.tail, p.r.n), p.tail)
	}
	if p.tail-head == p.r.n {
		return nil, nil, 0, errRingFull
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
		return nil, nil, 0, errRingFull
	}
	p.starts[p.tail%p.r.n] = p.apos
	p.apos = pos + uint64(n)
	slot := p.tail % p.r.n
	ent = p.r.ents[slot*ringEntrySize : (slot+1)*ringEntrySize]
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

// available is how many entries wait, or a ringError when the producer's
// tail makes no sense.
func (c *consumer) available() (uint64, error) {
	tail := c.r.tail.Load()
	if tail < c.head || tail-c.head > c.r.n {
		return 0, ringErrorf("%s ring: producer tail %d outside [%d, %d]", c.name, tail, c.head, c.head+c.r.n)
	}
	return tail - c.head, nil
}

// next reads the entry at head and copies its arena bytes out; the entry
// stays unconsumed until advance. The returned bytes are valid until the
// next call.
func (c *consumer) next() (ringEntry, []byte, error) {
	slot := c.head % c.r.n
	var e ringEntry
	e.decode(c.r.ents[slot*ringEntrySize : (slot+1)*ringEntrySize])
	if e.seq != c.head {
		return e, nil, ringErrorf("%s ring: entry %d carries sequence number %d", c.name, c.head, e.seq)
	}
	size := uint64(len(c.r.arena))
	if uint64(e.arenaOff)+uint64(e.arenaLen) > size {
		return e, nil, ringErrorf("%s ring: entry %d: arena range [%d, +%d) outside the arena (%d bytes)", c.name, c.head, e.arenaOff, e.arenaLen, size)
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

// doorbell wakes a sleeping side: word is the futex word, sleeping is set
// while its owner sleeps (or is about to).
//
// cpu is where the owner last spun (CPU number + 1; 0: not known), so that
// a spinner can tell whether it holds the very CPU its peer needs.
type doorbell struct {
	word, sleeping, cpu *atomic.Uint32
}

// ring wakes the owner if it sleeps. Call it after publishing.
func (d doorbell) ring() {
	if d.sleeping.Load() != 0 {
		d.word.Add(1)
		futexWake(d.word)
	}
}

// force wakes the owner whether or not it says it sleeps (shutdown).
func (d doorbell) force() {
	d.word.Add(1)
	futexWake(d.word)
}

// prepare announces that the owner is about to sleep and returns the word
// to wait on. The owner must check for work once more after it, then call
// wait or cancel.
func (d doorbell) prepare() uint32 {
	d.sleeping.Store(1)
	return d.word.Load()
}

// wait sleeps until the word moves from v, a wake-up, or timeout (none
// when timeout <= 0).
func (d doorbell) wait(v uint32, timeout time.Duration) {
	futexWait(d.word, v, timeout)
	d.sleeping.Store(0)
}

// cancel undoes prepare.
func (d doorbell) cancel() { d.sleeping.Store(0) }

// ringPureSpin is how long a spinner keeps its CPU before it starts
// giving it away.
const ringPureSpin = 50 * time.Microsecond

// yield is one round of a spin that began at since, by the owner of mine
// waiting for the owner of peer. While the peer last ran on another CPU,
// and for at most ringPureSpin, it only lets the other goroutines of this
// process run: a peer on another CPU answers in well under a microsecond,
// and giving the CPU away (sched_yield) costs some 8 µs per hand-off on a
// busy machine. When the peer last ran on this very CPU, or the spin has
// lasted, the spinner gives its CPU to other processes too: otherwise a
// spinner that shares its CPU with its peer stalls them both for a
// scheduler slice.
func yield(since time.Time, mine, peer doorbell) {
	pause(since, sameCPU(mine, peer))
}

// sameCPU records where the owner of mine runs and reports whether the
// owner of peer last ran there too. The caller must hold the mapping.
func sameCPU(mine, peer doorbell) bool {
	var cpu uint32
	if _, _, errno := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); errno != 0 {
		return false
	}
	mine.cpu.Store(cpu + 1)
	return peer.cpu.Load() == cpu+1
}

// pause is yield's second half; it touches no mapping.
func pause(since time.Time, same bool) {
	runtime.Gosched()
	if same || time.Since(since) > ringPureSpin {
		_, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
}

// FUTEX_WAIT and FUTEX_WAKE without FUTEX_PRIVATE_FLAG: the word is in a
// mapping shared between processes.
const (
	futexOpWait = 0
	futexOpWake = 1
)

func futexWait(w *atomic.Uint32, v uint32, timeout time.Duration) {
	var ts *unix.Timespec
	if timeout > 0 {
		t := unix.NsecToTimespec(timeout.Nanoseconds())
		ts = &t
	}
	// EAGAIN (the word moved), EINTR and ETIMEDOUT all mean: look again.
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexOpWait, uintptr(v), uintptr(unsafe.Pointer(ts)), 0, 0)
}

func futexWake(w *atomic.Uint32) {
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexOpWake, 1, 0, 0, 0)
}
