package fake

import (
	"os"
)

// NewRegionFile creates a zeroed file of size bytes for tests and demos to
// register as a region, and returns its path. It lives in dir, or when dir
// is empty under /dev/shm where that exists (so the region is RAM), else in
// os.TempDir(). The caller removes it.
func NewRegionFile(dir string, size int) (string, error) {
	if dir == "" {
		dir = os.TempDir()
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			dir = "/dev/shm"
		}
	}
	f, err := os.CreateTemp(dir, "custody-fake-region-*")
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := f.Truncate(int64(size)); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}
