package conformance

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/custody-dev/custody/sdk"
)

// region is memory the suite shares with an agent: a file in the check's
// directory, registered from byte base of the file on. The suite reads and
// writes it through the file, so it sees what the transport's mapping sees.
type region struct {
	a    *agent
	id   sdk.RegionID
	f    *os.File
	base uint64
	size uint64
}

// regionSpec is a region to create: size bytes from file offset base.
type regionSpec struct{ size, base uint64 }

// regions creates one file per spec and registers them in one call.
func (a *agent) regions(specs ...regionSpec) []*region {
	a.t.Helper()
	out := make([]*region, len(specs))
	req := make([]sdk.Region, len(specs))
	for i, s := range specs {
		path := filepath.Join(a.e.dir, fmt.Sprintf("r%d", a.e.files.Add(1)))
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			a.t.Fatalf("create region file: %v", err)
		}
		a.t.Cleanup(func() { _ = f.Close() })
		if err := f.Truncate(int64(s.base + s.size)); err != nil {
			a.t.Fatalf("size region file %s to %d bytes: %v", path, s.base+s.size, err)
		}
		out[i] = &region{a: a, f: f, base: s.base, size: s.size}
		req[i] = sdk.Region{Path: path, Offset: s.base, Length: s.size, Kind: sdk.MemoryHost}
	}
	ctx, cancel := a.e.callCtx()
	defer cancel()
	res, err := a.tr.RegisterMemory(ctx, req)
	errs := make([]error, len(res))
	for i, r := range res {
		errs[i] = r.Err
		if r.Err == nil {
			track(a, &a.heldRegions, r.ID)
		}
	}
	a.itemErrs("RegisterMemory", errs, err, len(req))
	for i, r := range res {
		out[i].id = r.ID
	}
	return out
}

// region creates and registers one region of size bytes at file offset 0.
func (a *agent) region(size uint64) *region {
	a.t.Helper()
	return a.regions(regionSpec{size: size})[0]
}

// write stores b at offset off of the region.
func (r *region) write(off uint64, b []byte) {
	r.a.t.Helper()
	if _, err := r.f.WriteAt(b, int64(r.base+off)); err != nil {
		r.a.t.Fatalf("write %d bytes at %d of region %d: %v", len(b), off, r.id, err)
	}
}

// read returns n bytes from offset off of the region.
func (r *region) read(off, n uint64) []byte {
	r.a.t.Helper()
	b := make([]byte, n)
	if _, err := r.f.ReadAt(b, int64(r.base+off)); err != nil {
		r.a.t.Fatalf("read %d bytes at %d of region %d: %v", n, off, r.id, err)
	}
	return b
}

// desc is the descriptor of n bytes at offset off of the region.
func (r *region) desc(off, n uint64) sdk.Descriptor {
	return sdk.Descriptor{Region: r.id, Offset: off, Length: n}
}

// pattern returns n pseudo-random bytes determined by seed, so that two
// transfers, or a transfer and a shifted copy of itself, never look alike.
func pattern(seed, n uint64) []byte {
	var key [32]byte
	for i := range 8 {
		key[i] = byte(seed >> (8 * i))
	}
	key[31] = 0xc5
	b := make([]byte, n)
	_, _ = rand.NewChaCha8(key).Read(b)
	return b
}

// firstDiff returns the first index where a and b differ, or -1.
func firstDiff(a, b []byte) int {
	n := min(len(a), len(b))
	for lo := 0; lo < n; lo += 4096 {
		hi := min(lo+4096, n)
		if string(a[lo:hi]) != string(b[lo:hi]) {
			for i := lo; i < hi; i++ {
				if a[i] != b[i] {
					return i
				}
			}
		}
	}
	if len(a) != len(b) {
		return n
	}
	return -1
}

// as returns a view of the region whose helpers report to a's T (a view
// of the region's agent, made by agent.as).
func (r *region) as(a *agent) *region {
	c := *r
	c.a = a
	return &c
}
