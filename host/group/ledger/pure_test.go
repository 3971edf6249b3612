package ledger

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLedgerIsPure: the ledger's code (its files but the tests) imports
// no etcd, no lock and nothing that does I/O, reads no clock, starts no
// goroutine and makes no channel: whatever it decides, it decides from
// its inputs alone, so a script replays it exactly.
func TestLedgerIsPure(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	forbidden := []string{"go.etcd.io/", "sync", "sync/atomic", "os", "net", "net/http", "io/ioutil", "context", "math/rand", "math/rand/v2", "crypto/rand", "unsafe", "runtime"}
	clock := map[string]bool{"Now": true, "Since": true, "Until": true, "After": true, "AfterFunc": true, "NewTimer": true, "NewTicker": true, "Tick": true, "Sleep": true}
	n := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		n++
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		timeName := ""
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path == "time" {
				timeName = "time"
				if imp.Name != nil {
					timeName = imp.Name.Name
				}
				assert.NotEqual(t, ".", timeName, "%s imports time unqualified", name)
			}
			for _, bad := range forbidden {
				ok := path != bad && !(strings.HasSuffix(bad, "/") && strings.HasPrefix(path, bad))
				assert.True(t, ok, "%s imports %s", name, path)
			}
		}
		ast.Inspect(f, func(node ast.Node) bool {
			switch x := node.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: starts a goroutine", fset.Position(x.Pos()))
			case *ast.ChanType:
				t.Errorf("%s: makes a channel", fset.Position(x.Pos()))
			case *ast.SelectorExpr:
				if id, ok := x.X.(*ast.Ident); ok && id.Name == timeName && clock[x.Sel.Name] {
					t.Errorf("%s: reads the clock (time.%s)", fset.Position(x.Pos()), x.Sel.Name)
				}
			}
			return true
		})
	}
	assert.Greater(t, n, 10, "no code found to check")
}
