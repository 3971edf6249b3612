package group

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/core"
)

// benchCluster is a joined 2-rank group for benchmarks (the embedded etcd
// writes to the test's temporary directory, with fsync, as in production).
func benchCluster(b *testing.B, size int) []*Group {
	b.Helper()
	dir := b.TempDir()
	ctx := context.Background()
	ranks := make([]*Group, size)
	var err error
	ranks[0], err = Open(ctx, rankConfig("bench", 0, size, dir, "127.0.0.1:0"), nil)
	require.NoError(b, err)
	for r := 1; r < size; r++ {
		ranks[r], err = Open(ctx, rankConfig("bench", r, size, dir, ranks[0].CoordinatorAddr()), nil)
		require.NoError(b, err)
	}
	b.Cleanup(func() {
		for r := size - 1; r >= 0; r-- {
			_ = ranks[r].Close()
		}
	})
	errs := make(chan error, size)
	for _, g := range ranks {
		go func() { errs <- g.Join(ctx, testMode()) }()
	}
	for range ranks {
		require.NoError(b, <-errs)
	}
	return ranks
}

func roundStates(round, n int) ([]Terminal, []core.RequestID) {
	ts := make([]Terminal, n)
	ids := make([]core.RequestID, n)
	for i := range ts {
		ids[i] = core.RequestID(fmt.Sprintf("r%d-%d", round, i))
		ts[i] = Terminal{Request: ids[i], State: Succeeded}
	}
	return ts, ids
}

// BenchmarkRound is one round of a 2-rank group in steady state: each rank
// reports 64 newly terminal requests, then resolves them (the previous
// rounds' acknowledgements and deletions ride along), woken by its watch.
// It reports etcd write and read transactions per round per rank.
// BenchmarkRound1 is one lone request's round trip the same way.
func BenchmarkRound(b *testing.B)  { benchRound(b, 64) }
func BenchmarkRound1(b *testing.B) { benchRound(b, 1) }

func benchRound(b *testing.B, inflight int) {
	ranks := benchCluster(b, 2)
	ctx := context.Background()
	before := make([]Stats, len(ranks))
	for r, g := range ranks {
		before[r] = g.Stats()
	}
	cpu0 := processCPU(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ts, ids := roundStates(i, inflight)
		for _, g := range ranks {
			if err := g.Report(ctx, ts); err != nil {
				b.Fatal(err)
			}
		}
		for _, g := range ranks {
			// As a host does: resolve what the watch has seen, and wait
			// for it to see more.
			for {
				out, err := g.Resolve(ctx, ids)
				if err != nil {
					b.Fatal(err)
				}
				if out[inflight-1].Resolved {
					break
				}
				<-g.Changed()
			}
		}
	}
	b.StopTimer()
	cpu := processCPU(b) - cpu0
	var w, rd uint64
	for r, g := range ranks {
		s := g.Stats()
		w += s.WriteTxns - before[r].WriteTxns
		rd += s.ReadTxns - before[r].ReadTxns
	}
	perRound := float64(b.N * len(ranks))
	b.ReportMetric(float64(w)/perRound, "writes/round/rank")
	b.ReportMetric(float64(rd)/perRound, "reads/round/rank")
	// CPU time (user and system, of the whole process: both ranks and the
	// embedded etcd) per request per rank: less sensitive than ns/op to
	// other processes taking the machine's CPUs.
	b.ReportMetric(float64(cpu.Nanoseconds())/perRound/float64(inflight), "cpu-ns/request/rank")
}

// processCPU is the CPU time this process has used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkResolve64 is the cost of one Resolve of 64 in-flight requests:
// in a 2-rank group where the other rank has not reported them yet (the
// watched view, no etcd read), side by side with a group of one
// (uncoordinated).
func BenchmarkResolve64(b *testing.B) {
	const inflight = 64
	for _, size := range []int{1, 2} {
		b.Run(fmt.Sprintf("ranks=%d", size), func(b *testing.B) {
			var g *Group
			if size == 1 {
				var err error
				g, err = Open(context.Background(), Config{Engine: "bench", Size: 1}, nil)
				require.NoError(b, err)
				b.Cleanup(func() { _ = g.Close() })
				require.NoError(b, g.Join(context.Background(), testMode()))
			} else {
				g = benchCluster(b, size)[0]
			}
			ctx := context.Background()
			ts, ids := roundStates(0, inflight)
			require.NoError(b, g.Report(ctx, ts))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				out, err := g.Resolve(ctx, ids)
				if err != nil {
					b.Fatal(err)
				}
				if size > 1 && out[0].Resolved {
					b.Fatal("resolved without the other rank")
				}
			}
		})
	}
}
