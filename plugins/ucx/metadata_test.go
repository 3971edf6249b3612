package ucx

import (
	"testing"

	"github.com/custody-dev/custody/sdk/kit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sampleMetadata() metadata {
	return metadata{
		Agent: "prefill-0", Proc: kit.Proc{Pid: 42, Start: 7}, TLS: "tcp", Address: []byte{1, 2, 3, 4},
		Regions: []remoteRegionSpec{{ID: 9, Addr: 0x7f0000000000, Length: 4096, Rkey: []byte{5, 6}}},
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	md := sampleMetadata()
	got, err := decodeMetadata(md.encode())
	require.NoError(t, err)
	assert.Equal(t, md, got)
}

func TestMetadataGarbage(t *testing.T) {
	good := sampleMetadata().encode()
	flip := append([]byte(nil), good...)
	flip[20] ^= 0xff
	other := sampleMetadata()
	other.Regions = append(other.Regions, other.Regions[0]) // duplicate id
	cases := map[string][]byte{
		"nil":             nil,
		"short":           good[:6],
		"truncated":       good[:len(good)-5],
		"bit flipped":     flip,
		"trailing byte":   append(append([]byte(nil), good...), 0),
		"bad magic":       append([]byte("NOTUCX!\x00"), good[8:]...),
		"duplicate ids":   other.encode(),
		"empty agent":     metadata{Proc: kit.Proc{Pid: 1}, Address: []byte{1}}.encode(),
		"oversized":       make([]byte, maxMetadataBytes+1),
		"random prefix 0": make([]byte, 64),
	}
	for name, blob := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := decodeMetadata(blob)
			assert.Error(t, err)
		})
	}
}
