package core

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// realFake is the import path core's tests must not use: what needs the real
// in-process fake transport runs in host/coreonfake.
const realFake = "github.com/custody-dev/custody/plugins/fake"

// clockNames are, per import path, the names that read, wait on or poll the
// wall clock. A fixed time (time.Date, time.Unix, t0.Add(d)) is fine: core
// learns the time only from the now its caller passes.
var clockNames = map[string][]string{
	"time":                                {"Sleep", "Now", "After", "AfterFunc", "Since", "Until", "NewTimer", "NewTicker", "Tick"},
	"github.com/stretchr/testify/require": {"Eventually", "Eventuallyf", "EventuallyWithT", "EventuallyWithTf", "Never", "Neverf"},
	"github.com/stretchr/testify/assert":  {"Eventually", "Eventuallyf", "EventuallyWithT", "EventuallyWithTf", "Never", "Neverf"},
}

// core's tests run on the scripted double only (double_test.go), and never
// on the wall clock, so that their result never depends on the scheduler
// or the machine's speed: no test file of core imports the real fake, and
// none reads, waits on or polls the clock.
func TestTestsUseTheDoubleAndNoClock(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	require.Contains(t, files, "hygiene_test.go", "run from core's directory")
	fset := token.NewFileSet()
	for _, f := range files {
		problems, err := testHygiene(fset, f, nil)
		require.NoError(t, err)
		assert.Empty(t, problems, "%s: use the scripted double (double_test.go) and fixed times; what needs the real fake or the clock belongs in host/coreonfake", f)
	}
}

// testHygiene lists what file (or src, when not nil) does that core's tests
// must not: import the real fake, or use a name of clockNames, through
// whatever name the file imports its package as.
func testHygiene(fset *token.FileSet, file string, src any) ([]string, error) {
	af, err := parser.ParseFile(fset, file, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var problems []string
	local := map[string]string{} // the name a watched package goes by in the file
	for _, im := range af.Imports {
		path, err := strconv.Unquote(im.Path.Value)
		if err != nil {
			return nil, err
		}
		if path == realFake || strings.HasPrefix(path, realFake+"/") {
			problems = append(problems, fmt.Sprintf("%s: imports %s", fset.Position(im.Pos()), path))
		}
		if _, ok := clockNames[path]; !ok {
			continue
		}
		name := path[strings.LastIndex(path, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		if name == "." {
			problems = append(problems, fmt.Sprintf("%s: dot-imports %s", fset.Position(im.Pos()), path))
			continue
		}
		local[name] = path
	}
	ast.Inspect(af, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		if path, ok := local[id.Name]; ok && slices.Contains(clockNames[path], sel.Sel.Name) {
			problems = append(problems, fmt.Sprintf("%s: uses %s.%s", fset.Position(sel.Pos()), id.Name, sel.Sel.Name))
		}
		return true
	})
	return problems, nil
}

// The hygiene check finds each thing it forbids, under any import name, and
// lets fixed times through.
func TestTestHygieneFindsWhatItForbids(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      int
	}{
		{"fixed times", `package core
import "time"
var a = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Second)
var b = time.Unix(0, 0)`, 0},
		{"the real fake", `package core
import fake "github.com/custody-dev/custody/plugins/fake"
var _ = fake.New`, 1},
		{"sleep and now", `package core
import "time"
func f() { time.Sleep(time.Millisecond); _ = time.Now() }`, 2},
		{"a renamed time", `package core
import clock "time"
func f() <-chan clock.Time { return clock.After(clock.Second) }`, 1},
		{"a timer, a ticker, since and until", `package core
import "time"
func f(d time.Time) { time.NewTimer(0); time.Tick(1); time.Since(d); time.Until(d) }`, 4},
		{"eventually", `package core
import ("testing"; "github.com/stretchr/testify/require")
func f(t *testing.T) { require.Eventually(t, func() bool { return true }, 1, 1) }`, 1},
		{"a dot-imported time", `package core
import . "time"
var _ = Second`, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems, err := testHygiene(token.NewFileSet(), "x_test.go", tc.src)
			require.NoError(t, err)
			assert.Len(t, problems, tc.want, "%v", problems)
		})
	}
}
