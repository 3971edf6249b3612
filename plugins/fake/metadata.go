package fake

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/custody-dev/custody/sdk"
)

// metadataMagic opens every metadata blob; metadataVersion follows it as a
// big-endian uint16, then the JSON body.
const (
	metadataMagic   = "custody-fake\x00"
	metadataVersion = 2
)

// metadata is what a peer needs to reach this agent: its name, its
// notification socket, its life lease file (held while the agent lives),
// and every registered region with its lease file.
type metadata struct {
	Agent  string `json:"agent"`
	PID    int    `json:"pid"`
	Notify string `json:"notify"`
	Life   string `json:"life"`
	// Incoming is the socket through which peers' chunks into and out of
	// this agent's regions are copied by this agent (fence=incoming);
	// empty under fence=initiated, where peers copy themselves.
	Incoming string       `json:"incoming,omitempty"`
	Regions  []metaRegion `json:"regions"`
}

// metaRegion is one registered region as a peer sees it.
type metaRegion struct {
	ID     uint64 `json:"id"`
	Path   string `json:"path"`
	Offset uint64 `json:"offset"`
	Length uint64 `json:"length"`
	Lease  string `json:"lease"`
}

// LocalMetadata returns the blob a peer loads to reach this agent's regions
// as they are registered now. It fails with BACKEND when the blob would
// exceed Limits.MaxMetadataBytes.
func (t *Transport) LocalMetadata(ctx context.Context) ([]byte, error) {
	if err := t.lock(ctx, ""); err != nil {
		return nil, err
	}
	md := metadata{Agent: t.agent, PID: pid, Notify: t.addr, Life: t.life.path(), Regions: []metaRegion{}}
	if t.in != nil {
		md.Incoming = t.in.addr
	}
	for _, r := range t.book.Regions() {
		md.Regions = append(md.Regions, metaRegion{ID: uint64(r.ID), Path: r.Spec.Path, Offset: r.Spec.Offset, Length: r.Spec.Length, Lease: r.Value.lease.path()})
	}
	t.mu.Unlock()
	blob, err := encodeMetadata(md)
	if err != nil {
		return nil, sdk.Errorf(sdk.CodeBackend, "fake: LocalMetadata of agent %q: %v", md.Agent, err)
	}
	if len(blob) > maxMetadataBytes {
		return nil, sdk.Errorf(sdk.CodeBackend, "fake: LocalMetadata of agent %q: %d bytes exceed the limit of %d; register fewer regions", md.Agent, len(blob), maxMetadataBytes)
	}
	return blob, nil
}

// encodeMetadata renders md as a versioned blob.
func encodeMetadata(md metadata) ([]byte, error) {
	body, err := json.Marshal(md)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(metadataMagic)
	_ = binary.Write(&b, binary.BigEndian, uint16(metadataVersion))
	b.Write(body)
	return b.Bytes(), nil
}

// decodeMetadata parses a blob made by encodeMetadata and checks that it is
// whole: a name, a socket, regions with non-zero lengths and distinct ids.
func decodeMetadata(blob []byte) (metadata, error) {
	var md metadata
	if len(blob) > maxMetadataBytes {
		return md, fmt.Errorf("%d bytes exceed the limit of %d", len(blob), maxMetadataBytes)
	}
	rest, ok := bytes.CutPrefix(blob, []byte(metadataMagic))
	if !ok || len(rest) < 2 {
		return md, fmt.Errorf("not fake metadata (bad magic)")
	}
	if v := binary.BigEndian.Uint16(rest); v != metadataVersion {
		return md, fmt.Errorf("metadata version %d unsupported; this fake reads version %d", v, metadataVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(rest[2:]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&md); err != nil {
		return md, fmt.Errorf("malformed body: %v", err)
	}
	if dec.More() {
		return md, fmt.Errorf("trailing bytes after the body")
	}
	if md.Agent == "" || md.Notify == "" || md.Life == "" {
		return md, fmt.Errorf("agent name, notification address or life lease missing")
	}
	seen := map[uint64]bool{}
	for _, r := range md.Regions {
		if r.ID == 0 || seen[r.ID] || r.Path == "" || r.Length == 0 || r.Lease == "" {
			return md, fmt.Errorf("region %d is malformed or repeated", r.ID)
		}
		seen[r.ID] = true
	}
	return md, nil
}
