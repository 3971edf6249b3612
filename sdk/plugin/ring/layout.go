package ring

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// The mapping's layout: a header at fixed offsets, then each ring's
// entries, then each ring's arena (doc.go: Layout).

// Version is the layout version; a plugin refuses any other.
const Version = 2

// magic starts the header of a ring file.
const magic uint64 = 0x31474e4952594443 // "CDYRING1"

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
	headerSize     = 4096
)

// entrySize is the size of one entry of either ring.
const entrySize = 64

// Default ring sizes. The arenas are sized so that a Post of thousands of
// transfers with their index lists fits in one entry; tmpfs backs a page
// only once it is touched.
const (
	defaultSubEntries  = 1024
	defaultCompEntries = 4096
	defaultSubArena    = 4 << 20
	defaultCompArena   = 4 << 20
	maxEntries         = 1 << 16
	maxArena           = 64 << 20
)

// Layout is the size of each part of a mapping.
type Layout struct {
	subEntries, compEntries uint32
	subArena, compArena     uint64
}

var DefaultLayout = Layout{defaultSubEntries, defaultCompEntries, defaultSubArena, defaultCompArena}

// size is the mapping's size in bytes.
func (l Layout) size() int {
	return headerSize + int(l.subEntries+l.compEntries)*entrySize + int(l.subArena+l.compArena)
}

func (l Layout) validate() error {
	switch {
	case l.subEntries == 0 || l.subEntries > maxEntries || l.compEntries == 0 || l.compEntries > maxEntries:
		return fmt.Errorf("ring entries %d/%d outside [1, %d]", l.subEntries, l.compEntries, maxEntries)
	case l.subArena < 4096 || l.subArena > maxArena || l.compArena < 4096 || l.compArena > maxArena:
		return fmt.Errorf("ring arenas %d/%d outside [4096, %d]", l.subArena, l.compArena, maxArena)
	}
	return nil
}

// mapping is one side's view of the mapping.
type mapping struct {
	mem    []byte
	layout Layout
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

// writeHeader writes the header of a new mapping.
func writeHeader(mem []byte, l Layout) {
	binary.LittleEndian.PutUint64(mem[offMagic:], magic)
	binary.LittleEndian.PutUint32(mem[offVersion:], Version)
	binary.LittleEndian.PutUint32(mem[offSubEntries:], l.subEntries)
	binary.LittleEndian.PutUint32(mem[offCompEntries:], l.compEntries)
	binary.LittleEndian.PutUint64(mem[offSubArena:], l.subArena)
	binary.LittleEndian.PutUint64(mem[offCompArena:], l.compArena)
}

// readHeader checks the header of a mapping of size bytes and returns
// its layout.
func readHeader(mem []byte) (Layout, error) {
	if len(mem) < headerSize {
		return Layout{}, fmt.Errorf("ring file of %d bytes is shorter than its header (%d)", len(mem), headerSize)
	}
	if m := binary.LittleEndian.Uint64(mem[offMagic:]); m != magic {
		return Layout{}, fmt.Errorf("ring file magic %#x, want %#x: not a ring file", m, magic)
	}
	if v := binary.LittleEndian.Uint32(mem[offVersion:]); v != Version {
		return Layout{}, fmt.Errorf("ring layout version %d, this side speaks %d", v, Version)
	}
	l := Layout{
		subEntries:  binary.LittleEndian.Uint32(mem[offSubEntries:]),
		compEntries: binary.LittleEndian.Uint32(mem[offCompEntries:]),
		subArena:    binary.LittleEndian.Uint64(mem[offSubArena:]),
		compArena:   binary.LittleEndian.Uint64(mem[offCompArena:]),
	}
	if err := l.validate(); err != nil {
		return Layout{}, err
	}
	if l.size() != len(mem) {
		return Layout{}, fmt.Errorf("ring file is %d bytes, its header states %d", len(mem), l.size())
	}
	return l, nil
}

// newMapping views mem (whose header is valid for l) as rings.
func newMapping(mem []byte, l Layout) *mapping {
	off := headerSize
	take := func(n int) []byte {
		b := mem[off : off+n : off+n]
		off += n
		return b
	}
	m := &mapping{mem: mem, layout: l}
	m.sub = ringMem{ents: take(int(l.subEntries) * entrySize), n: uint64(l.subEntries), tail: u64At(mem, offSubTail), head: u64At(mem, offSubHead)}
	m.comp = ringMem{ents: take(int(l.compEntries) * entrySize), n: uint64(l.compEntries), tail: u64At(mem, offCompTail), head: u64At(mem, offCompHead)}
	m.sub.arena = take(int(l.subArena))
	m.comp.arena = take(int(l.compArena))
	m.plugin = doorbell{word: u32At(mem, offPluginBell), sleeping: u32At(mem, offPluginBell+4), cpu: u32At(mem, offPluginBell+8)}
	m.host = doorbell{word: u32At(mem, offHostBell), sleeping: u32At(mem, offHostBell+4), cpu: u32At(mem, offHostBell+8)}
	return m
}
