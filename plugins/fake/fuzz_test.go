package fake

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzDecodeMetadata: no blob a peer hands LoadPeers makes the decoder or
// the path check panic; a blob the decoder accepts is whole (a name, a
// socket, a life lease, regions with distinct non-zero ids, lengths and
// leases) and encodes back to metadata that decodes the same; and one the
// path check passes names only files inside the allowed directory and a
// socket of the fake's namespace. The seed corpus runs as a plain test.
func FuzzDecodeMetadata(f *testing.F) {
	dir := f.TempDir()
	good := metadata{Agent: "a", PID: 7, Notify: notifyPrefix + "7/1/00", Life: filepath.Join(dir, "life.lease"), Incoming: incomingPrefix + "7/2/00",
		Regions: []metaRegion{{ID: 1, Path: filepath.Join(dir, "r"), Offset: 4096, Length: 65536, Lease: filepath.Join(dir, "r.lease")}}}
	blob, err := encodeMetadata(good)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(blob)
	f.Add([]byte(metadataMagic + "\x00\x02" + `{"agent":"a","pid":1,"notify":"@x","life":"/etc/passwd","regions":[{"id":1,"path":"../../etc","offset":0,"length":1,"lease":"l"}]}`))
	f.Add([]byte(metadataMagic + "\x00\x02" + `{"agent":"a","notify":"@custody-fake/1","life":"l","regions":[{"id":1,"path":"p","length":1,"lease":"l"},{"id":1,"path":"p","length":1,"lease":"l"}]}`))
	f.Add([]byte(metadataMagic + "\x00\x01{}"))
	f.Add([]byte(metadataMagic + "\x00\x02" + `{"agent":"a","notify":"@custody-fake/1","life":"/tmp/l","incoming":"@elsewhere","regions":[]}`))
	f.Add([]byte("custody-fake"))
	f.Fuzz(func(t *testing.T, blob []byte) {
		md, err := decodeMetadata(blob)
		if err != nil {
			return
		}
		if md.Agent == "" || md.Notify == "" || md.Life == "" {
			t.Fatalf("accepted metadata without agent, socket or life lease: %+v", md)
		}
		ids := map[uint64]bool{}
		for _, r := range md.Regions {
			if r.ID == 0 || ids[r.ID] || r.Path == "" || r.Length == 0 || r.Lease == "" {
				t.Fatalf("accepted region %+v", r)
			}
			ids[r.ID] = true
		}
		again, err := encodeMetadata(md)
		if err != nil {
			t.Fatalf("accepted metadata does not encode: %v", err)
		}
		md2, err := decodeMetadata(again)
		if err != nil || !reflect.DeepEqual(normal(md), normal(md2)) {
			t.Fatalf("accepted metadata changes when encoded again: %+v, then %+v (%v)", md, md2, err)
		}
		if checkPeerPaths(md, []string{dir}) != nil {
			return
		}
		if !strings.HasPrefix(md.Notify, notifyPrefix) || (md.Incoming != "" && !strings.HasPrefix(md.Incoming, incomingPrefix)) {
			t.Fatalf("accepted notification socket %q or incoming socket %q", md.Notify, md.Incoming)
		}
		paths := []string{md.Life}
		for _, r := range md.Regions {
			paths = append(paths, r.Path, r.Lease)
		}
		for _, p := range paths {
			if !filepath.IsAbs(p) {
				p = filepath.Join(mustGetwd(t), p)
			}
			if rel, err := filepath.Rel(dir, filepath.Clean(p)); err != nil || rel == "." || strings.HasPrefix(rel, "..") {
				t.Fatalf("path %q outside %s passed the check", p, dir)
			}
		}
	})
}

// normal makes an empty region list and a missing one compare equal.
func normal(md metadata) metadata {
	if len(md.Regions) == 0 {
		md.Regions = nil
	}
	return md
}

func mustGetwd(t *testing.T) string {
	wd, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	return wd
}
