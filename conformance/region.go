package conformance

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"

	"github.com/custody-dev/custody/sdk"
	pluginagent "github.com/custody-dev/custody/sdk/plugin/agent"
)

// region is memory the suite shares with an agent: a file in the check's
// directory, registered from byte Offset of the file on, seen by the
// helpers of one agent view. The suite reads and writes it through the
// file, so it sees what the transport's mapping sees.
type region struct {
	a *agent
	*pluginagent.Region
}

// regionSpec is a region to create: size bytes from file offset base.
type regionSpec struct{ size, base uint64 }

// regions creates one file per spec and registers them in one call.
func (a *agent) regions(specs ...regionSpec) []*region {
	a.t.Helper()
	out := make([]*region, len(specs))
	shared := make([]*pluginagent.Region, len(specs))
	for i, s := range specs {
		path := filepath.Join(a.e.dir, fmt.Sprintf("r%d", a.e.files.Add(1)))
		f, err := pluginagent.CreateFile(path, s.base+s.size)
		if err != nil {
			a.t.Fatalf("create region file %s of %d bytes: %v", path, s.base+s.size, err)
		}
		a.t.Cleanup(func() { _ = f.Close() })
		shared[i] = &pluginagent.Region{File: f, Offset: s.base, Length: s.size}
		out[i] = &region{a: a, Region: shared[i]}
	}
	ctx, cancel := a.e.callCtx()
	defer cancel()
	errs, err := pluginagent.Register(ctx, a.tr, shared...)
	for _, r := range shared {
		if r.ID != 0 {
			track(a, &a.heldRegions, r.ID)
		}
	}
	a.itemErrs("RegisterMemory", errs, err, len(specs))
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
	if _, err := r.File.WriteAt(b, int64(r.Offset+off)); err != nil {
		r.a.t.Fatalf("write %d bytes at %d of region %d: %v", len(b), off, r.ID, err)
	}
}

// read returns n bytes from offset off of the region.
func (r *region) read(off, n uint64) []byte {
	r.a.t.Helper()
	b := make([]byte, n)
	if _, err := r.File.ReadAt(b, int64(r.Offset+off)); err != nil {
		r.a.t.Fatalf("read %d bytes at %d of region %d: %v", n, off, r.ID, err)
	}
	return b
}

// desc is the descriptor of n bytes at offset off of the region.
func (r *region) desc(off, n uint64) sdk.Descriptor { return r.Desc(off, n) }

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
