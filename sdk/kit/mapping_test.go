package kit

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/custody-dev/custody/sdk"
)

// TestMapFile: a region maps shared at its offset; a missing file and a
// range past the file's end are INVALID_ARGUMENT.
func TestMapFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "region")
	if err := os.WriteFile(path, make([]byte, 3*4096), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := MapFile(path, 4096+16, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Bytes) != 100 || m.Addr() == 0 {
		t.Fatalf("mapping of %d bytes at %#x", len(m.Bytes), m.Addr())
	}
	copy(m.Bytes, "shared")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b[4096+16:4096+22]) != "shared" {
		t.Errorf("a write through the mapping is not in the file at the region's offset")
	}
	if err := m.Unmap(); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func() error{
		"missing file":   func() error { _, err := MapFile(path+".none", 0, 1); return err },
		"past the end":   func() error { _, err := MapFile(path, 2*4096, 4097); return err },
		"offset too far": func() error { _, err := MapFile(path, 3*4096, 1); return err },
	} {
		if err := f(); sdk.CodeOf(err) != sdk.CodeInvalidArgument {
			t.Errorf("%s: got %v, want INVALID_ARGUMENT", name, err)
		}
	}
}
