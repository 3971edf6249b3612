package plugin_test

import (
	"context"
	"io"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/internal/testbin"
	"github.com/custody-dev/custody/sdk/plugin"
)

const heapFloorEnv = "CUSTODY_TRANSPORT_HEAP_FLOOR_MIB"

// TestServeKeepsAHeapFloor: a transport process keeps the heap floor its
// environment asks for (its address space, against none), and
// the floor is not resident; a floor that is not a number stops the
// process at start, naming the variable.
func TestServeKeepsAHeapFloor(t *testing.T) {
	size := func(floor string) (vm, rss uint64) {
		t.Setenv(heapFloorEnv, floor)
		p := launch(t, fakeBin, plugin.LaunchOptions{})
		vm, err := testbin.StatusKiB(p.Pid(), "VmSize")
		require.NoError(t, err)
		rss, err = testbin.StatusKiB(p.Pid(), "VmRSS")
		require.NoError(t, err)
		return vm, rss
	}
	// A floor of 4 GiB: more address space than the process maps without
	// one (about 1.8 GiB here), so that reaching it proves the floor.
	vm0, rss0 := size("0")
	vm1, rss1 := size("4096")
	assert.GreaterOrEqual(t, vm1, uint64(4<<20), "4 GiB of address space (KiB: %d without a floor, %d with)", vm0, vm1)
	assert.Less(t, rss1, rss0+64<<10, "and not 4 GiB more memory (KiB: %d without a floor, %d with)", rss0, rss1)

	t.Setenv(heapFloorEnv, "lots")
	r, w := io.Pipe()
	logs := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		logs <- string(b)
	}()
	_, err := plugin.Launch(context.Background(), fakeBin, plugin.LaunchOptions{Logger: hclog.New(&hclog.LoggerOptions{Output: w})})
	require.Error(t, err)
	require.NoError(t, w.Close())
	assert.Contains(t, <-logs, heapFloorEnv+`=\"lots\"`, "the plugin says what was wrong")
}
