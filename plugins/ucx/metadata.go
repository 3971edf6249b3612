package ucx

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/kit"
)

// Metadata layout, version 1, little endian:
//
//	magic "CUSTUCX\x00" | version u16 | agent (u16 length, bytes)
//	| pid u32 | start u64 | tls (u16 length, bytes)
//	| worker address (u32 length, bytes)
//	| region count u32 | per region: id u64, address u64, length u64,
//	  rkey (u32 length, bytes)
//	| crc32 (IEEE) of everything before it
//
// The checksum and exact length make garbage fail cleanly before any UCX
// call sees it.
var metadataMagic = [8]byte{'C', 'U', 'S', 'T', 'U', 'C', 'X', 0}

// metadataVersion is the layout version this transport writes and reads.
const metadataVersion = 1

// metadata is what a peer needs to reach an agent.
type metadata struct {
	Agent   string
	Proc    kit.Proc
	TLS     string
	Address []byte
	Regions []remoteRegionSpec
}

// remoteRegionSpec is one registered region as a peer sees it.
type remoteRegionSpec struct {
	ID     sdk.RegionID
	Addr   uint64
	Length uint64
	Rkey   []byte
}

// LocalMetadata returns this agent's worker address and the packed rkey of
// every registered region.
func (t *Transport) LocalMetadata(ctx context.Context) ([]byte, error) {
	var blob []byte
	var err error
	if cerr := t.do(ctx, "LocalMetadata", 0, func(a *agent) { blob, err = a.metadata() }); cerr != nil {
		return nil, cerr
	}
	return blob, err
}

func (a *agent) metadata() ([]byte, error) {
	addr, err := a.nw.address()
	if err != nil {
		return nil, err
	}
	md := metadata{Agent: a.name, Proc: a.self, TLS: a.cfg.tls, Address: addr}
	for _, r := range a.book.Regions() {
		md.Regions = append(md.Regions, remoteRegionSpec{ID: r.ID, Addr: uint64(r.Value.addr), Length: r.Spec.Length, Rkey: r.Value.rkey})
	}
	blob := md.encode()
	if len(blob) > maxMetadataBytes {
		return nil, sdk.Errorf(sdk.CodeBackend, "ucx: LocalMetadata of agent %q: %d bytes exceed the limit of %d; register fewer regions", a.name, len(blob), maxMetadataBytes)
	}
	return blob, nil
}

func (m metadata) encode() []byte {
	var b bytes.Buffer
	le := binary.LittleEndian
	b.Write(metadataMagic[:])
	b.Write(le.AppendUint16(nil, metadataVersion))
	b.Write(le.AppendUint16(nil, uint16(len(m.Agent))))
	b.WriteString(m.Agent)
	b.Write(le.AppendUint32(nil, m.Proc.Pid))
	b.Write(le.AppendUint64(nil, m.Proc.Start))
	b.Write(le.AppendUint16(nil, uint16(len(m.TLS))))
	b.WriteString(m.TLS)
	b.Write(le.AppendUint32(nil, uint32(len(m.Address))))
	b.Write(m.Address)
	b.Write(le.AppendUint32(nil, uint32(len(m.Regions))))
	for _, r := range m.Regions {
		b.Write(le.AppendUint64(nil, uint64(r.ID)))
		b.Write(le.AppendUint64(nil, r.Addr))
		b.Write(le.AppendUint64(nil, r.Length))
		b.Write(le.AppendUint32(nil, uint32(len(r.Rkey))))
		b.Write(r.Rkey)
	}
	b.Write(le.AppendUint32(nil, crc32.ChecksumIEEE(b.Bytes())))
	return b.Bytes()
}

// errShort is a truncated field.
var errShort = errors.New("truncated")

// reader reads little-endian fields, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = errShort
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u16() uint16 {
	if v := r.take(2); v != nil {
		return binary.LittleEndian.Uint16(v)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if v := r.take(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if v := r.take(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

// decodeMetadata parses a blob, refusing anything that is not exactly a
// version-1 blob with a good checksum.
func decodeMetadata(blob []byte) (metadata, error) {
	var m metadata
	if len(blob) > maxMetadataBytes {
		return m, fmt.Errorf("%d bytes exceed the limit of %d", len(blob), maxMetadataBytes)
	}
	if len(blob) < len(metadataMagic)+2+4 {
		return m, fmt.Errorf("%d bytes is too short to be UCX metadata", len(blob))
	}
	if !bytes.Equal(blob[:len(metadataMagic)], metadataMagic[:]) {
		return m, errors.New("not UCX transport metadata (bad magic)")
	}
	body, sum := blob[:len(blob)-4], binary.LittleEndian.Uint32(blob[len(blob)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return m, errors.New("checksum mismatch (corrupt or truncated)")
	}
	r := &reader{b: body[len(metadataMagic):]}
	if v := r.u16(); v != metadataVersion {
		return m, fmt.Errorf("version %d, this transport reads version %d", v, metadataVersion)
	}
	m.Agent = string(r.take(int(r.u16())))
	m.Proc.Pid = r.u32()
	m.Proc.Start = r.u64()
	m.TLS = string(r.take(int(r.u16())))
	m.Address = bytes.Clone(r.take(int(r.u32())))
	n := r.u32()
	if r.err == nil && uint64(n)*28 > uint64(len(r.b)) {
		return m, fmt.Errorf("claims %d regions in %d bytes", n, len(r.b))
	}
	seen := map[sdk.RegionID]bool{}
	for i := uint32(0); i < n && r.err == nil; i++ {
		s := remoteRegionSpec{ID: sdk.RegionID(r.u64()), Addr: r.u64(), Length: r.u64()}
		s.Rkey = bytes.Clone(r.take(int(r.u32())))
		if r.err == nil && (s.ID == 0 || seen[s.ID] || s.Length == 0 || len(s.Rkey) == 0) {
			return m, fmt.Errorf("region %d of %d is malformed (id %d, length %d, rkey %d bytes)", i, n, s.ID, s.Length, len(s.Rkey))
		}
		seen[s.ID] = true
		m.Regions = append(m.Regions, s)
	}
	switch {
	case r.err != nil:
		return m, fmt.Errorf("field %w", r.err)
	case len(r.b) != 0:
		return m, fmt.Errorf("%d trailing bytes", len(r.b))
	case m.Agent == "" || len(m.Address) == 0 || m.Proc.Pid == 0:
		return m, errors.New("missing agent name, worker address or pid")
	}
	return m, nil
}
