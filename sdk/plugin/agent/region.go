package agent

import (
	"context"
	"errors"
	"os"

	"github.com/custody-dev/custody/sdk"
)

// Dir is where region files go by default: /dev/shm when it exists (the
// memory a transport maps is then RAM, as an engine's is), else the
// temporary directory.
func Dir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// Region is memory shared with an agent: Length bytes of File from byte
// Offset on, and the agent's id for it once registered. Whoever holds File
// reads and writes the region's bytes through it, as the transport's
// mapping sees them.
type Region struct {
	File           *os.File
	Offset, Length uint64
	// ID is the agent's id for the region, 0 until Register registered it.
	ID sdk.RegionID
}

// Desc is the descriptor of n bytes at offset off of the region.
func (r *Region) Desc(off, n uint64) sdk.Descriptor {
	return sdk.Descriptor{Region: r.ID, Offset: off, Length: n}
}

// Blocks are the descriptors of n consecutive blocks of size bytes from
// the start of the region.
func (r *Region) Blocks(n int, size uint64) []sdk.Descriptor {
	ds := make([]sdk.Descriptor, n)
	for i := range ds {
		ds[i] = r.Desc(uint64(i)*size, size)
	}
	return ds
}

// Remove closes the region's file and removes it.
func (r *Region) Remove() error {
	return errors.Join(r.File.Close(), os.Remove(r.File.Name()))
}

// CreateFile makes a region file at path: a new file (an existing one is
// an error), readable and writable by this user alone, size bytes of
// zeros, open for reading and writing.
func CreateFile(path string, size uint64) (*os.File, error) {
	return createFile(func() (*os.File, error) { return os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600) }, size)
}

// createFile sizes the file that create makes; on an error it removes it.
func createFile(create func() (*os.File, error), size uint64) (*os.File, error) {
	f, err := create()
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(int64(size)); err != nil {
		return nil, errors.Join(err, f.Close(), os.Remove(f.Name()))
	}
	return f, nil
}

// Register registers the regions with t in one RegisterMemory call, as
// host memory, and sets the ID of each that registered. It returns the
// call's error, or the transport's error for each region it answered for
// (nil where it registered): a transport that answers for another number of
// regions than it was given is for the caller to find.
func Register(ctx context.Context, t sdk.Transport, rs ...*Region) ([]error, error) {
	req := make([]sdk.Region, len(rs))
	for i, r := range rs {
		req[i] = sdk.Region{Path: r.File.Name(), Offset: r.Offset, Length: r.Length, Kind: sdk.MemoryHost}
	}
	res, err := t.RegisterMemory(ctx, req)
	if err != nil {
		return nil, err
	}
	errs := make([]error, len(res))
	for i, x := range res {
		errs[i] = x.Err
		if x.Err == nil && i < len(rs) {
			rs[i].ID = x.ID
		}
	}
	return errs, nil
}
