package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/host/group"
)

func runGroup(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newGroupCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(t.Context())
	return out.String(), err
}

// TestGroupClearPoisonCommand: `custody group poisoned` lists, and
// `custody group clear-poison` clears, the durable poison of an engine's
// pool in a real (embedded) etcd; the rank holding the etcd sees it go;
// clearing it again, or naming no coordinator, is refused with a clear
// error.
func TestGroupClearPoisonCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := group.Open(ctx, group.Config{Engine: "dec", Rank: 0, Size: 2,
		Coordinator: group.CoordinatorConfig{Embedded: &group.EmbeddedConfig{Dir: t.TempDir(), Listen: "127.0.0.1:0"}}}, nil)
	require.NoError(t, err)
	defer g.Close()
	require.NoError(t, g.Poison(ctx, "kv", "block 3 quarantined on rank 0"))
	addr := g.CoordinatorAddr()

	out, err := runGroup(t, "poisoned", "--engine", "dec", "--endpoints", addr)
	require.NoError(t, err)
	assert.Contains(t, out, `pool "kv" poisoned by rank 0`)
	assert.Contains(t, out, "block 3 quarantined on rank 0")

	out, err = runGroup(t, "clear-poison", "--engine", "dec", "--endpoints", addr, "--pool", "kv")
	require.NoError(t, err)
	assert.Contains(t, out, `cleared the poison of pool "kv"`)
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		if _, ok := g.IsPoisoned("kv"); !ok {
			break
		}
		select {
		case <-g.Changed():
		case <-deadline.C:
			t.Fatal("the group's watch never saw the poison cleared")
		}
	}

	_, err = runGroup(t, "clear-poison", "--engine", "dec", "--endpoints", addr, "--pool", "kv")
	require.ErrorIs(t, err, group.ErrNotPoisoned)
	_, err = runGroup(t, "clear-poison", "--pool", "kv")
	require.ErrorContains(t, err, "give --config FILE, or --engine E with --endpoints")
	out, err = runGroup(t, "poisoned", "--engine", "dec", "--endpoints", addr)
	require.NoError(t, err)
	assert.Contains(t, out, "no pool poisoned")
}
