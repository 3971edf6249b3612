package nixl

import (
	"encoding/binary"
	"hash/crc32"
	"reflect"
	"testing"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/kit"
)

func TestMetadataRoundTrip(t *testing.T) {
	m := metadata{Agent: "prefill.3", Proc: kit.Proc{Pid: 42, Start: 7}, NIXL: []byte("nixl blob"),
		Regions: []mdRegion{{ID: 5, Addr: 0x7f0000001000, Len: 4096}, {ID: 9, Addr: 0x7f0000100000, Len: 1 << 20}}}
	got, err := decodeMetadata(m.encode())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("decoded %+v, encoded %+v", got, m)
	}
}

// TestMetadataRefused: anything but a whole envelope of this version is
// INVALID_ARGUMENT.
func TestMetadataRefused(t *testing.T) {
	good := metadata{Agent: "a", NIXL: []byte("x"), Regions: []mdRegion{{ID: 1, Addr: 2, Len: 3}}}.encode()
	flipped := append([]byte(nil), good...)
	flipped[10] ^= 1
	for name, b := range map[string][]byte{
		"empty":         nil,
		"garbage":       []byte("not metadata at all"),
		"truncated":     good[:len(good)/2],
		"checksum":      flipped,
		"no agent":      metadata{NIXL: []byte("x")}.encode(),
		"no NIXL blob":  metadata{Agent: "a"}.encode(),
		"trailing byte": resum(append(body(good), 0)),
		"other version": resum(append(append([]byte(nil), good[:4]...), append([]byte{2, 0, 0, 0}, body(good)[8:]...)...)),
	} {
		if _, err := decodeMetadata(b); sdk.CodeOf(err) != sdk.CodeInvalidArgument {
			t.Errorf("%s: got %v, want INVALID_ARGUMENT", name, err)
		}
	}
}

// body is an envelope without its checksum.
func body(b []byte) []byte { return append([]byte(nil), b[:len(b)-4]...) }

// resum appends a valid checksum to body.
func resum(body []byte) []byte {
	return binary.LittleEndian.AppendUint32(body, crc32.ChecksumIEEE(body))
}
