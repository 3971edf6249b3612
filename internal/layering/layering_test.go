// Package layering holds the test that the import graph keeps the house's
// layers (docs/architecture.md): cmd -> host -> core -> sdk; plugins ->
// sdk; conformance -> sdk and the process boundary (sdk/plugin).
package layering

import (
	"go/build"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/custody-dev/custody/"

// layer is one rule: the packages under prefix (the prefix itself and
// below) may import the module's packages under allow, and packages from
// outside the module only when thirdParty (the standard library always).
type layer struct {
	prefix     string
	allow      []string
	thirdParty []string // import path prefixes; "*" allows any
}

// layers are the rules, most specific prefix first: a package takes the
// first rule whose prefix it is under.
var layers = []layer{
	{prefix: "sdk/plugin/ring", allow: []string{"sdk"}, thirdParty: []string{"golang.org/x/sys"}},
	{prefix: "sdk/plugin", allow: []string{"sdk", "internal/heapfloor"}, thirdParty: []string{"*"}},
	{prefix: "sdk/kit", allow: []string{"sdk"}, thirdParty: []string{"golang.org/x/sys"}},
	{prefix: "sdk", allow: nil},
	{prefix: "core", allow: []string{"sdk"}},
	{prefix: "conformance", allow: []string{"sdk"}, thirdParty: []string{"*"}},
	{prefix: "host/group/ledger", allow: []string{"core", "sdk"}},
	{prefix: "host/group", allow: []string{"core", "sdk"}, thirdParty: []string{"*"}},
	{prefix: "host", allow: []string{"api", "core", "sdk"}, thirdParty: []string{"*"}},
	{prefix: "plugins", allow: []string{"sdk", "internal/ucxtls"}, thirdParty: []string{"*"}},
	{prefix: "examples", allow: []string{"sdk"}, thirdParty: []string{"*"}},
	{prefix: "client", allow: []string{"api"}, thirdParty: []string{"*"}},
	{prefix: "api", allow: nil, thirdParty: []string{"*"}},
}

// A package may always import below itself (host imports host/group, a
// plugin's command its plugin), and the commands of plugins and examples
// (cmd/ below them) may import the process boundary to serve.
func allowed(l layer, pkg, imp string) bool {
	if !strings.HasPrefix(imp, module) {
		if !strings.Contains(strings.Split(imp, "/")[0], ".") {
			return true // the standard library
		}
		return slices.ContainsFunc(l.thirdParty, func(p string) bool { return p == "*" || imp == p || strings.HasPrefix(imp, p+"/") })
	}
	rel := strings.TrimPrefix(imp, module)
	if under(rel, l.prefix) || under(rel, topOf(pkg, l.prefix)) {
		return true
	}
	if strings.Contains(pkg, "/cmd/") && under(rel, "sdk") {
		return true
	}
	return slices.ContainsFunc(l.allow, func(a string) bool { return under(rel, a) })
}

func under(p, prefix string) bool { return p == prefix || strings.HasPrefix(p, prefix+"/") }

// topOf is the package a command serves: plugins/fake for
// plugins/fake/cmd/custody-transport-fake.
func topOf(pkg, prefix string) string {
	if i := strings.Index(pkg, "/cmd/"); i >= 0 {
		return pkg[:i]
	}
	return pkg
}

func rule(pkg string) (layer, bool) {
	for _, l := range layers {
		if under(pkg, l.prefix) {
			return l, true
		}
	}
	return layer{}, false
}

// TestLayers checks, per layer, every non-test import of every package of
// the module against its rule.
func TestLayers(t *testing.T) {
	root := filepath.Join("..", "..")
	imports := map[string][]string{}
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "python" || name == "bin") {
			return filepath.SkipDir
		}
		p, err := build.ImportDir(path, 0)
		if err != nil {
			return nil // no Go files here
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		imports[filepath.ToSlash(rel)] = p.Imports
		return nil
	}))
	require.Contains(t, imports, "core", "the walk found the module's packages")
	for _, l := range layers {
		t.Run(l.prefix, func(t *testing.T) {
			n := 0
			for pkg, imps := range imports {
				if r, ok := rule(pkg); !ok || r.prefix != l.prefix {
					continue
				}
				n++
				for _, imp := range imps {
					if !allowed(l, pkg, imp) {
						t.Errorf("%s imports %s, against the layering (docs/architecture.md)", pkg, imp)
					}
				}
			}
			require.NotZero(t, n, "no package under %s", l.prefix)
		})
	}
}
