package bench

import (
	"bytes"
	"fmt"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/internal/testbin"
)

// TestBenchRanksPrintsItsGoalLine runs a short ranks bench and
// checks the figures and the goal line CI reads.
func TestBenchRanksPrintsItsGoalLine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts eight hosts and an etcd")
	}
	dir, err := testbin.Build(t.TempDir(), "custody", "custody-transport-fake")
	require.NoError(t, err)
	var out bytes.Buffer
	err = Ranks(t.Context(), &out, HostsConfig{Custody: filepath.Join(dir, "custody"), Transport: "fake",
		Concurrency: 4, Duration: 200 * time.Millisecond, BlockSize: 4 << 10})
	require.NoError(t, err, out.String())
	num := `[0-9]+\.[0-9]us`
	for _, re := range []string{
		fmt.Sprintf(`(?m)^coordinated rounds pulls/s:( [1-9][0-9]*){%d}$`, ranksBenchRounds),
		fmt.Sprintf(`(?m)^independent rounds pulls/s:( [1-9][0-9]*){%d}$`, ranksBenchRounds),
		`(?m)^coordinated +pulls/s at 4 +[1-9][0-9]*$`,
		`(?m)^independent +pulls/s at 4 +[1-9][0-9]*$`,
		`(?m)^coordinated +latency seq +p50 ` + num + ` +p99 ` + num + `$`,
		`(?m)^independent +latency at 4 +p50 ` + num + ` +p99 ` + num + `$`,
		// The coordinated ranks write to etcd: every rank of both engines.
		`(?m)^etcd writes/s per rank +pre/0 [1-9][0-9]* +pre/1 [1-9][0-9]* +dec/0 [1-9][0-9]* +dec/1 [1-9][0-9]* +\(all ranks: [1-9][0-9]* revisions/s`,
		`(?m)^added p50 latency +seq [+-]` + num + ` +at 4 [+-]` + num,
		// Both sets' processes used CPU while they pulled.
		`(?m)^CPU per pull +coordinated [1-9][0-9]*\.[0-9]us +independent [1-9][0-9]*\.[0-9]us +\([+-][0-9]+\.[0-9] %;`,
		`(?m)^  of which the hosts +coordinated [0-9]+\.[0-9]us +independent [0-9]+\.[0-9]us`,
		fmt.Sprintf(`(?m)^loss per round +(-?[0-9]+\.[0-9] ){%d}%% +\(median -?[0-9]+\.[0-9] %%;`, ranksBenchRounds),
		`(?m)^goal name=rank-cost value=-?[0-9]+\.[0-9] target=5 met=(yes|no)$`,
	} {
		assert.Regexp(t, regexp.MustCompile(re), out.String())
	}
	assert.Contains(t, out.String(), "method:", "the output says how it measured")
}

func TestBenchRanksRefusesAnotherTransport(t *testing.T) {
	err := Ranks(t.Context(), &bytes.Buffer{}, HostsConfig{Custody: "unused", Transport: "ucx",
		Concurrency: 1, Duration: time.Second, BlockSize: 1})
	assert.ErrorContains(t, err, `only the fake transport`)
}
