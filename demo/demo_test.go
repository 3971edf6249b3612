package demo

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/internal/testbin"
)

// custodyBin is the custody binary, built by TestMain next to the fake
// transport so that hosts find it.
var custodyBin string

func TestMain(m *testing.M) {
	testbin.Main(m, func(dir string) { custodyBin = filepath.Join(dir, "custody") },
		"custody", "custody-transport-fake", "custody-transport-ucx")
}

func TestDemoWithEveryFaultFindsNoCorruptionAndNoLeak(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := Run(ctx, Options{Custody: custodyBin, Requests: 90, Concurrency: 6, Dir: logsOnFailure(t)})
	require.NoError(t, err)
	t.Logf("%+v", s)
	assert.True(t, s.Clean(), "corrupted %d, invalid missing %d, duplicates %d, leaks %v", s.Corrupted, s.InvalidMissing, s.Duplicates, s.Leaks)
	assert.Equal(t, 90, s.OK+s.Failed, "every request got exactly one outcome")
	assert.Positive(t, s.Failed, "the faults failed some requests")
	assert.Positive(t, s.OK, "most requests succeeded")
	assert.GreaterOrEqual(t, s.Fences, uint64(1), "the transport crash was fenced")
}

// TestRanksDemo: over two engines of two ranks each, with every rank-level
// fault, no byte is wrong, every rank agrees, a block quarantined on one
// rank poisons its pool on both and new requests there are refused, the
// rank with another block size is refused at startup, and the leak audit
// finds nothing.
func TestRanksDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := logsOnFailure(t)
	s, err := RunRanks(ctx, Options{Custody: custodyBin, Requests: 12, BlockSize: 4096, Dir: dir})
	require.NoError(t, err)
	for _, name := range []string{"pre-0", "pre-1", "dec-0", "dec-1", "bad-0", "bad-1", "psn-0", "psn-1"} {
		assert.NoDirExists(t, host.SocketParent(filepath.Join(dir, "state"), name), "%s's transport sockets, killed or not", name)
	}
	t.Logf("%+v", s)
	assert.True(t, s.Clean(), "summary: %+v", s)
	assert.Equal(t, 12, s.OK+s.Failed)
	assert.Positive(t, s.UnionFailed, "dec-1's failures failed requests that succeeded on dec-0")
	assert.Equal(t, 2, s.PoisonedPools)
	assert.Equal(t, 2, s.PoisonRefused)
	assert.Equal(t, []string{"kv"}, s.Poisoned["psn-1"], "the rank that quarantined nothing has the pool poisoned too")
	assert.Empty(t, s.Poisoned["dec-0"])
	assert.Empty(t, s.Leaks)
}

// The negative control: with blocks reused before their transfers end, the
// same checks must find corruption, or they prove nothing.
func TestDemoUnsafeEagerReleaseIsCaughtCorrupting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := Run(ctx, Options{Custody: custodyBin, Requests: 60, Concurrency: 6, UnsafeEagerRelease: true, Dir: logsOnFailure(t)})
	require.NoError(t, err)
	t.Logf("%+v", s)
	assert.Positive(t, s.Corrupted, "releasing running transfers and reusing their blocks corrupted later requests")
	assert.False(t, s.Clean())
}

// The same engine calls work with the transport swapped by config alone.
func TestDemoOverUCX(t *testing.T) {
	for _, tls := range []string{"tcp", "posix,sysv,cma"} {
		t.Run(tls, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			s, err := Run(ctx, Options{Custody: custodyBin, Transport: "ucx", Params: map[string]string{"tls": tls}, Requests: 30, Concurrency: 4, Dir: logsOnFailure(t)})
			require.NoError(t, err)
			assert.True(t, s.Clean(), "%+v", s)
			assert.Equal(t, 30, s.OK+s.Failed, "every request got exactly one outcome")
			assert.GreaterOrEqual(t, s.Fences, uint64(2), "both killed transports were fenced")
		})
	}
}

// logsOnFailure returns a directory for the run's hosts and, if the test
// fails, logs the tail of each host's log.
func logsOnFailure(t *testing.T) string {
	dir := t.TempDir()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("%s:\n%s", l, b)
		}
	})
	return dir
}

// A short soak, as `make soak` runs a long one: faults fire all along, two
// transports are killed from outside, and the verdict holds (but for the
// rarer fault kinds, which a run this short may miss).
func TestSoakShort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := Run(ctx, Options{Custody: custodyBin, Soak: true, Requests: 300, Kills: 2, Dir: logsOnFailure(t)})
	require.NoError(t, err)
	line, err := s.SoakVerdict(2, false)
	require.NoError(t, err)
	t.Logf("%s; fault kinds that did not fire: %v", line, s.MissingFaults())
	assert.Less(t, len(s.MissingFaults()), len(faultKinds)/2, "most fault kinds fired")
	assert.Equal(t, 2, s.Kills)
	assert.GreaterOrEqual(t, s.Restarts, uint64(2), "each killed transport was restarted")
}
