package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// parseParams turns repeated --param k=v flags into a map, refusing a
// malformed or repeated key.
func parseParams(kvs []string) (map[string]string, error) {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--param %q: want key=value", kv)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("--param %q: key %q given twice", kv, k)
		}
		out[k] = v
	}
	return out, nil
}

// defaultPlugin is the path of the named transport binary installed next to
// this custody binary (make build puts both in ./bin).
func defaultPlugin(name string) string { return sibling("custody-transport-" + name) }

// sibling is the program name next to this one (make build puts custody's
// programs side by side), or name alone when this one's path is unknown.
func sibling(name string) string {
	exe, err := os.Executable()
	if err != nil {
		return name
	}
	return filepath.Join(filepath.Dir(exe), name)
}

// repoFile is path in the source tree this program was built in: make
// build puts custody in bin/ of the tree, so the tree is its directory's
// parent.
func repoFile(path string) string {
	return filepath.Join(filepath.Dir(filepath.Dir(sibling("custody"))), path)
}
