package nixl

import (
	"encoding/binary"
	"errors"
	"hash/crc32"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/kit"
)

// The metadata an agent hands its peers wraps NIXL's own (getLocalMD) in
// an envelope of ours: NIXL's blob says where the agent's memory is but
// not under which custody region ids, and its agent name can only be read
// by loading it. The envelope carries, versioned and checksummed, the agent
// name, its process (pid and start time, so a peer on this host can watch
// it), each region's id, address and length, and NIXL's blob.
const (
	mdMagic   = "CNXL"
	mdVersion = 1
)

// mdRegion is one registered region as metadata names it.
type mdRegion struct {
	ID   sdk.RegionID
	Addr uint64
	Len  uint64
}

// metadata is the decoded envelope.
type metadata struct {
	Agent   string
	Proc    kit.Proc
	Regions []mdRegion
	NIXL    []byte
}

// encode renders m, checksummed.
func (m metadata) encode() []byte {
	b := make([]byte, 0, 64+len(m.Agent)+24*len(m.Regions)+len(m.NIXL))
	b = append(b, mdMagic...)
	b = binary.LittleEndian.AppendUint32(b, mdVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Agent)))
	b = append(b, m.Agent...)
	b = binary.LittleEndian.AppendUint32(b, m.Proc.Pid)
	b = binary.LittleEndian.AppendUint64(b, m.Proc.Start)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Regions)))
	for _, r := range m.Regions {
		b = binary.LittleEndian.AppendUint64(b, uint64(r.ID))
		b = binary.LittleEndian.AppendUint64(b, r.Addr)
		b = binary.LittleEndian.AppendUint64(b, r.Len)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.NIXL)))
	b = append(b, m.NIXL...)
	return binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

// errShort is a blob that ends early.
var errShort = errors.New("truncated")

// decodeMetadata reads an envelope; anything else (garbage, truncated,
// another version, a bad checksum) is INVALID_ARGUMENT.
func decodeMetadata(b []byte) (metadata, error) {
	bad := func(format string, args ...any) (metadata, error) {
		return metadata{}, sdk.Errorf(sdk.CodeInvalidArgument, "nixl: LoadPeers: metadata "+format+"; pass the blob the peer's LocalMetadata returned", args...)
	}
	if len(b) < len(mdMagic)+8 || string(b[:len(mdMagic)]) != mdMagic {
		return bad("of %d bytes is not a custody NIXL agent's", len(b))
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return bad("fails its checksum (truncated or damaged)")
	}
	r := reader{b: body[len(mdMagic):]}
	if v := r.u32(); v != mdVersion {
		return bad("version %d; this agent reads version %d", v, mdVersion)
	}
	var m metadata
	m.Agent = string(r.bytes(int(r.u32())))
	m.Proc.Pid = r.u32()
	m.Proc.Start = r.u64()
	n := r.u32()
	if r.err == nil && uint64(n)*24 > uint64(len(r.b)) {
		r.err = errShort
	}
	for i := uint32(0); i < n && r.err == nil; i++ {
		m.Regions = append(m.Regions, mdRegion{ID: sdk.RegionID(r.u64()), Addr: r.u64(), Len: r.u64()})
	}
	m.NIXL = r.bytes(int(r.u32()))
	switch {
	case r.err != nil:
		return bad("is %v", r.err)
	case len(r.b) != 0:
		return bad("has %d bytes past its end", len(r.b))
	case m.Agent == "":
		return bad("names no agent")
	case len(m.NIXL) == 0:
		return bad("carries no NIXL metadata")
	}
	return m, nil
}

// reader reads little-endian fields, remembering the first shortfall.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.b) {
		r.err = errShort
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) u32() uint32 {
	if b := r.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if b := r.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (r *reader) bytes(n int) []byte { return append([]byte(nil), r.take(n)...) }
