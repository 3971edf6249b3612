package ledger

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/scripttest"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/core"
)

// args is a command's words: the command, then k=v pairs in order; raw=
// takes the rest of the line.
type args struct {
	t    *testing.T
	line int
	cmd  string
	kvs  [][2]string
}

func parseArgs(t *testing.T, c scripttest.Case) args {
	a := args{t: t, line: c.Line}
	line, raw, hasRaw := strings.Cut(c.Cmd, " raw=")
	f := strings.Fields(line)
	a.cmd = f[0]
	for _, w := range f[1:] {
		k, v, ok := strings.Cut(w, "=")
		if !ok { // (require.True walks the stack even when it holds)
			require.Fail(t, fmt.Sprintf("line %d: argument %q is not k=v", c.Line, w))
		}
		a.kvs = append(a.kvs, [2]string{k, v})
	}
	if hasRaw {
		a.kvs = append(a.kvs, [2]string{"raw", raw})
	}
	return a
}

func (a args) get(k string) (string, bool) {
	for _, kv := range a.kvs {
		if kv[0] == k {
			return kv[1], true
		}
	}
	return "", false
}

func (a args) str(k string) string {
	v, ok := a.get(k)
	require.True(a.t, ok, "line %d: want %s=", a.line, k)
	return v
}

func (a args) int(k string, def int) int {
	v, ok := a.get(k)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(a.t, err, "line %d", a.line)
	return n
}

func (a args) bool(k string) bool {
	v, ok := a.get(k)
	if !ok {
		return false
	}
	b, err := strconv.ParseBool(v)
	require.NoError(a.t, err, "line %d", a.line)
	return b
}

func (a args) dur(k string, def time.Duration) time.Duration {
	v, ok := a.get(k)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	require.NoError(a.t, err, "line %d", a.line)
	return d
}

// ids is ids=a,b.
func (a args) ids() []core.RequestID {
	var ids []core.RequestID
	if v, ok := a.get("ids"); ok {
		for _, id := range strings.Split(v, ",") {
			ids = append(ids, core.RequestID(id))
		}
	}
	return ids
}

// rest is every pair but those named.
func (a args) rest(skip ...string) [][2]string {
	var out [][2]string
outer:
	for _, kv := range a.kvs {
		for _, s := range skip {
			if kv[0] == s {
				continue outer
			}
		}
		out = append(out, kv)
	}
	return out
}
