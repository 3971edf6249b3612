package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// printRanks prints what Ranks measured in rounds (of names[i] in
// rounds[i], coordinated first): the median round of each mode, etcd's
// writes, the added latency and CPU, the loss of each round and the goal
// line CI reads.
func printRanks(out io.Writer, cfg HostsConfig, names [2]string, rounds [][]ranksRound) {
	co, in := medianRound(rounds[0]), medianRound(rounds[1])

	fmt.Fprintf(out, "custody bench --e2e --ranks 2: transport %s, %d B blocks\n", cfg.Transport, cfg.BlockSize)
	if v := os.Getenv("CUSTODY_TRANSPORT_RINGS"); v != "" {
		fmt.Fprintf(out, "rings: CUSTODY_TRANSPORT_RINGS=%s in the transports' environment\n", v)
	}
	fmt.Fprintf(out, "method: a prefill and a decode engine of two ranks each, one `custody serve` host and one fake transport process per rank. A pull is one logical request: ExpectSend of two blocks (one per decode rank) on each prefill rank, then on each decode rank a Read of one block from each prefill rank (notify_producer); it is timed from the first Read until the last decode rank's finished report, and ends once both prefill ranks reported it too. Coordinated: each engine's ranks are a rank group agreeing through an etcd embedded in prefill rank 0 (as `custody demo --ranks 2`); independent: the same four hosts with no group section. Both sets run side by side; %d warm-up pulls each, then %d rounds of each interleaved (each mode first in every other round, coordinated in the first), each round %d sequential pulls then %d pulls kept in flight for %v; the median round of each is reported. etcd writes are each rank's write transactions during the throughput run, from the hosts' Status (group_writes).\n",
		e2eWarmup, ranksBenchRounds, ranksSeqPulls, cfg.Concurrency, cfg.Duration)
	for i, rs := range rounds {
		var rates []string
		for _, r := range rs {
			rates = append(rates, fmt.Sprintf("%.0f", r.rate))
		}
		fmt.Fprintf(out, "%s rounds pulls/s: %s\n", names[i], strings.Join(rates, " "))
	}
	for i, r := range []ranksRound{co, in} {
		name := names[i]
		fmt.Fprintf(out, "%-12s pulls/s at %-3d %.0f\n", name, cfg.Concurrency, r.rate)
		fmt.Fprintf(out, "%-12s latency seq   p50 %s  p99 %s\n", name, us(pct(r.seq, 50)), us(pct(r.seq, 99)))
		fmt.Fprintf(out, "%-12s latency at %-3d p50 %s  p99 %s\n", name, cfg.Concurrency, us(pct(r.conc, 50)), us(pct(r.conc, 99)))
	}
	secs := co.elapsed.Seconds()
	var per []string
	for _, k := range []string{"pre/0", "pre/1", "dec/0", "dec/1"} {
		per = append(per, fmt.Sprintf("%s %.0f", k, float64(co.writes[k])/secs))
	}
	fmt.Fprintf(out, "etcd writes/s per rank  %s  (all ranks: %.0f revisions/s, %.2f writes per pull per rank)\n",
		strings.Join(per, "  "), float64(co.revs)/secs, float64(co.revs)/4/(co.rate*secs))
	fmt.Fprintf(out, "added p50 latency       seq %s  at %d %s  (coordinated minus independent)\n",
		signedUs(pct(co.seq, 50)-pct(in.seq, 50)), cfg.Concurrency, signedUs(pct(co.conc, 50)-pct(in.conc, 50)))
	perPull := func(r ranksRound, d time.Duration) time.Duration {
		return time.Duration(float64(d) / (r.rate * r.elapsed.Seconds()))
	}
	cpuCo, cpuIn := perPull(co, co.cpu), perPull(in, in.cpu)
	hostCo, hostIn := perPull(co, co.hostCPU), perPull(in, in.hostCPU)
	fmt.Fprintf(out, "CPU per pull            coordinated %s  independent %s  (%+.1f %%; the hosts and their transports, etcd included, during the throughput run, from /proc)\n",
		us(cpuCo), us(cpuIn), 100*(float64(cpuCo)/float64(cpuIn)-1))
	fmt.Fprintf(out, "  of which the hosts    coordinated %s  independent %s  (etcd runs in prefill rank 0's host)\n", us(hostCo), us(hostIn))
	// Each round's two measurements ran back to back, so their ratio
	// varies less than the medians' when other processes come and go.
	var paired []float64
	for n := range rounds[0] {
		paired = append(paired, 100*(rounds[1][n].rate-rounds[0][n].rate)/rounds[1][n].rate)
	}
	var each []string
	for _, l := range paired {
		each = append(each, fmt.Sprintf("%.1f", l))
	}
	fmt.Fprintf(out, "loss per round          %s %%  (median %.1f %%; each round's coordinated and independent runs back to back)\n", strings.Join(each, " "), median(paired))
	loss := 100 * (in.rate - co.rate) / in.rate
	fmt.Fprintf(out, "goal name=rank-cost value=%.1f target=5 met=%s\n", loss, yesNo(loss <= 5))
}

// medianRound is the round of median throughput (the lower middle one of
// an even count).
func medianRound(rs []ranksRound) ranksRound {
	s := make([]ranksRound, len(rs))
	copy(s, rs)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].rate < s[j-1].rate; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s[(len(s)-1)/2]
}
