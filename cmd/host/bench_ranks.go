package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/custody-dev/custody/client"
	"github.com/custody-dev/custody/internal/cluster"
	"github.com/custody-dev/custody/sdk/plugin/agent"
)

// ranksBenchRounds is how many times each mode is measured, interleaved
// (coordinated, independent, coordinated, ...); the median of each is kept.
const ranksBenchRounds = 5

// ranksSeqPulls is the sequential pulls measured per round, for latency.
const ranksSeqPulls = 100

// ranksReportWait bounds the wait for a pull's finished reports.
const ranksReportWait = 30 * time.Second

// rankMode is one of the two rank sets measured, with its report watchers.
type rankMode struct {
	name     string
	set      *cluster.RankSet
	pre, dec []*reports
	// src[r] are prefill rank r's blocks, dst[q] decode rank q's: worker w
	// uses src[r][2w+q] (read by decode rank q) and dst[q][2w+r] (its part
	// from prefill rank r).
	src, dst [][]uint32
	seq      atomic.Uint64
	etcd     *clientv3.Client
	dir      string
}

// ranksRound is one measured round of one mode.
type ranksRound struct {
	rate    float64         // pulls per second at cfg.concurrency
	seq     []time.Duration // sequential pull latencies
	conc    []time.Duration // latencies under cfg.concurrency in flight
	elapsed time.Duration   // of the throughput run
	// writes counts, per "engine/rank", the etcd write transactions seen
	// during the throughput run; revs the etcd revisions it advanced.
	writes map[string]int
	revs   int64
	// cpu is the CPU time the four hosts and their transport processes
	// (the embedded etcd included) used during the throughput run; hostCPU
	// the hosts' part.
	cpu, hostCPU time.Duration
}

// runE2ERanks measures, in one run, pulls per second with cfg.concurrency
// logical requests in flight over a prefill and a decode engine of two
// ranks each: once as rank groups agreeing through an embedded etcd, once
// as four independent hosts, interleaved.
func runE2ERanks(ctx context.Context, out io.Writer, cfg e2eConfig) (err error) {
	if cfg.transport != "fake" {
		return fmt.Errorf("--ranks 2: only the fake transport is supported, not %q", cfg.transport)
	}
	dir, err := os.MkdirTemp(agent.Dir(), "custody-bench-ranks-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	blocks := 2*cfg.concurrency + 8
	modes := make([]*rankMode, 2)
	defer func() {
		for _, m := range modes {
			if m != nil {
				err = errors.Join(err, m.stop())
			}
		}
	}()
	for i, coordinated := range []bool{true, false} {
		name := map[bool]string{true: "coordinated", false: "independent"}[coordinated]
		set, err := cluster.StartRankSet(ctx, cluster.RankSetOptions{Custody: cfg.custody, Dir: filepath.Join(dir, name),
			Coordinated: coordinated, Blocks: blocks, BlockSize: cfg.blockSize})
		if err != nil {
			return fmt.Errorf("%s ranks: %w", name, err)
		}
		m := &rankMode{name: name, set: set, dir: filepath.Join(dir, name)}
		modes[i] = m
		for _, h := range set.Prefill {
			m.pre = append(m.pre, newReports(ctx, h.Client, cfg.poll))
		}
		for _, h := range set.Decode {
			m.dec = append(m.dec, newReports(ctx, h.Client, cfg.poll))
		}
		if set.Etcd != "" {
			if m.etcd, err = clientv3.New(clientv3.Config{Endpoints: []string{set.Etcd}, DialTimeout: 5 * time.Second}); err != nil {
				return fmt.Errorf("etcd %s: %w", set.Etcd, err)
			}
		}
		if err := m.prepare(ctx, cfg.concurrency); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		for range e2eWarmup {
			if _, err := m.pull(ctx, "warm", 0); err != nil {
				return fmt.Errorf("%s: warm-up: %w", name, err)
			}
		}
	}
	rounds := make([][]ranksRound, 2)
	for n := range ranksBenchRounds {
		// Each mode goes first in every other round, so that neither
		// always meets the machine as the other left it.
		for k := range modes {
			i := (k + n) % len(modes)
			m := modes[i]
			r, err := m.round(ctx, cfg)
			if err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			rounds[i] = append(rounds[i], r)
		}
	}
	co, in := medianRound(rounds[0]), medianRound(rounds[1])

	fmt.Fprintf(out, "custody bench --e2e --ranks 2: transport %s, %d B blocks\n", cfg.transport, cfg.blockSize)
	if v := os.Getenv("CUSTODY_TRANSPORT_RINGS"); v != "" {
		fmt.Fprintf(out, "rings: CUSTODY_TRANSPORT_RINGS=%s in the transports' environment\n", v)
	}
	fmt.Fprintf(out, "method: a prefill and a decode engine of two ranks each, one `custody serve` host and one fake transport process per rank. A pull is one logical request: ExpectSend of two blocks (one per decode rank) on each prefill rank, then on each decode rank a Read of one block from each prefill rank (notify_producer); it is timed from the first Read until the last decode rank's finished report, and ends once both prefill ranks reported it too. Coordinated: each engine's ranks are a rank group agreeing through an etcd embedded in prefill rank 0 (as `custody demo --ranks 2`); independent: the same four hosts with no group section. Both sets run side by side; %d warm-up pulls each, then %d rounds of each interleaved (each mode first in every other round, coordinated in the first), each round %d sequential pulls then %d pulls kept in flight for %v; the median round of each is reported. etcd writes are each rank's write transactions during the throughput run, from the hosts' Status (group_writes).\n",
		e2eWarmup, ranksBenchRounds, ranksSeqPulls, cfg.concurrency, cfg.duration)
	for i, rs := range rounds {
		var rates []string
		for _, r := range rs {
			rates = append(rates, fmt.Sprintf("%.0f", r.rate))
		}
		fmt.Fprintf(out, "%s rounds pulls/s: %s\n", modes[i].name, strings.Join(rates, " "))
	}
	for i, r := range []ranksRound{co, in} {
		name := modes[i].name
		fmt.Fprintf(out, "%-12s pulls/s at %-3d %.0f\n", name, cfg.concurrency, r.rate)
		fmt.Fprintf(out, "%-12s latency seq   p50 %s  p99 %s\n", name, us(pct(r.seq, 50)), us(pct(r.seq, 99)))
		fmt.Fprintf(out, "%-12s latency at %-3d p50 %s  p99 %s\n", name, cfg.concurrency, us(pct(r.conc, 50)), us(pct(r.conc, 99)))
	}
	secs := co.elapsed.Seconds()
	var per []string
	for _, k := range []string{"pre/0", "pre/1", "dec/0", "dec/1"} {
		per = append(per, fmt.Sprintf("%s %.0f", k, float64(co.writes[k])/secs))
	}
	fmt.Fprintf(out, "etcd writes/s per rank  %s  (all ranks: %.0f revisions/s, %.2f writes per pull per rank)\n",
		strings.Join(per, "  "), float64(co.revs)/secs, float64(co.revs)/4/(co.rate*secs))
	fmt.Fprintf(out, "added p50 latency       seq %s  at %d %s  (coordinated minus independent)\n",
		signedUs(pct(co.seq, 50)-pct(in.seq, 50)), cfg.concurrency, signedUs(pct(co.conc, 50)-pct(in.conc, 50)))
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
	return nil
}

// median is the middle value of xs (the lower middle one of an even
// count).
func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[(len(s)-1)/2]
}

func signedUs(d time.Duration) string {
	if d >= 0 {
		return "+" + us(d)
	}
	return us(d)
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

func (m *rankMode) stop() error {
	for _, r := range append(m.pre, m.dec...) {
		r.stop()
	}
	var err error
	if m.etcd != nil {
		err = m.etcd.Close()
	}
	return errors.Join(err, m.set.Stop())
}

func (m *rankMode) prepare(ctx context.Context, n int) error {
	for _, hs := range []struct {
		hosts []*cluster.Host
		to    *[][]uint32
	}{{m.set.Prefill, &m.src}, {m.set.Decode, &m.dst}} {
		for _, h := range hs.hosts {
			b, err := h.Client.Alloc(ctx, h.Pool, 2*n)
			if err != nil {
				return fmt.Errorf("%s: alloc %d blocks: %w", h.Name, 2*n, err)
			}
			*hs.to = append(*hs.to, b)
		}
	}
	return nil
}

// pull runs one logical request with worker w's blocks.
func (m *rankMode) pull(ctx context.Context, prefix string, w int) (time.Duration, error) {
	id := fmt.Sprintf("%s-%d", prefix, m.seq.Add(1))
	var sent, recv []<-chan string
	for _, r := range m.pre {
		sent = append(sent, r.expect(id))
	}
	for _, r := range m.dec {
		recv = append(recv, r.expect(id))
	}
	token := client.NewToken() // the same on every rank: one logical request
	for r, p := range m.set.Prefill {
		if err := p.Client.ExpectSend(ctx, id, token, "", p.Pool, m.src[r][2*w:2*w+2], len(m.set.Decode), time.Minute); err != nil {
			return 0, fmt.Errorf("%s: %s: expect send: %w", id, p.Name, err)
		}
	}
	start := time.Now()
	for q, d := range m.set.Decode {
		parts := make([]client.Part, len(m.set.Prefill))
		for r := range parts {
			parts[r] = client.Part{Pool: d.Pool, Local: m.dst[q][2*w+r : 2*w+r+1], Rank: uint32(r), Remote: m.src[r][2*w+q : 2*w+q+1]}
		}
		for {
			err := d.Client.Read(ctx, id, token, "prefill", true, parts...)
			if err == nil {
				break
			}
			if !errors.Is(err, client.ErrUnavailable) { // the peer's handshake runs
				return 0, fmt.Errorf("%s: %s: read: %w", id, d.Name, err)
			}
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(time.Millisecond): // pacing while the handshake runs
			}
		}
	}
	var took time.Duration
	names := make([]string, 0, len(recv)+len(sent))
	for _, h := range m.set.Decode {
		names = append(names, h.Name)
	}
	for _, h := range m.set.Prefill {
		names = append(names, h.Name)
	}
	stuck := time.NewTimer(ranksReportWait)
	defer stuck.Stop()
	for i, ch := range append(recv, sent...) {
		select {
		case <-stuck.C:
			var held []string
			for _, h := range append(append([]*cluster.Host{}, m.set.Decode...), m.set.Prefill...) {
				if st, err := h.Client.Status(ctx); err == nil && st.GetRequests() > 0 {
					held = append(held, fmt.Sprintf("%s holds %d requests", h.Name, st.GetRequests()))
				}
			}
			return 0, fmt.Errorf("%s: %s did not report it finished within %v (%s); see the hosts' logs in %s", id, names[i], ranksReportWait, strings.Join(held, ", "), m.dir)
		case reason := <-ch:
			if i == len(recv)-1 {
				took = time.Since(start)
			}
			if reason != "" {
				return 0, fmt.Errorf("%s failed: %s", id, reason)
			}
		case <-ctx.Done():
			return 0, fmt.Errorf("%s: no finished report: %w", id, ctx.Err())
		}
	}
	return took, nil
}

// round measures sequential latency, then throughput with cfg.concurrency
// in flight, counting the etcd writes made meanwhile.
func (m *rankMode) round(ctx context.Context, cfg e2eConfig) (ranksRound, error) {
	var r ranksRound
	for range ranksSeqPulls {
		d, err := m.pull(ctx, "seq", 0)
		if err != nil {
			return r, err
		}
		r.seq = append(r.seq, d)
	}
	var count func() (map[string]int, int64, error)
	if m.etcd != nil {
		var err error
		if count, err = m.countWrites(ctx); err != nil {
			return r, err
		}
	}
	cpu0, host0, err := m.cpu()
	if err != nil {
		return r, err
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs = make(chan error, cfg.concurrency)
	)
	start := time.Now()
	deadline := start.Add(cfg.duration)
	for w := range cfg.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for time.Now().Before(deadline) {
				d, err := m.pull(ctx, "conc", w)
				if err != nil {
					errs <- err
					break
				}
				mine = append(mine, d)
			}
			mu.Lock()
			r.conc = append(r.conc, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	cpu1, host1, err := m.cpu()
	if err != nil {
		return r, err
	}
	r.cpu, r.hostCPU = cpu1-cpu0, host1-host0
	close(errs)
	if err := <-errs; err != nil {
		return r, err
	}
	r.rate = float64(len(r.conc)) / r.elapsed.Seconds()
	if count != nil {
		var err error
		if r.writes, r.revs, err = count(); err != nil {
			return r, err
		}
	}
	return r, nil
}

// countWrites reads every ranked host's count of etcd write transactions
// (Status group_writes) and etcd's revision; the function it returns reads
// them again and returns the writes made since per "engine/rank" and the
// revisions passed. Nothing watches etcd for it: a watch of every key would
// cost the coordinated hosts' etcd what it measures.
func (m *rankMode) countWrites(ctx context.Context) (func() (map[string]int, int64, error), error) {
	read := func() (map[string]uint64, int64, error) {
		n := map[string]uint64{}
		for _, hs := range []struct {
			engine string
			hosts  []*cluster.Host
		}{{"pre", m.set.Prefill}, {"dec", m.set.Decode}} {
			for r, h := range hs.hosts {
				st, err := h.Client.Status(ctx)
				if err != nil {
					return nil, 0, fmt.Errorf("%s: status: %w", h.Name, err)
				}
				n[hs.engine+"/"+strconv.Itoa(r)] = st.GetGroupWrites()
			}
		}
		resp, err := m.etcd.Get(ctx, "/custody/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return nil, 0, fmt.Errorf("etcd: current revision: %w", err)
		}
		return n, resp.Header.Revision, nil
	}
	before, from, err := read()
	if err != nil {
		return nil, err
	}
	return func() (map[string]int, int64, error) {
		after, to, err := read()
		if err != nil {
			return nil, 0, err
		}
		out := map[string]int{}
		for k, v := range after {
			out[k] = int(v - before[k])
		}
		return out, to - from, nil
	}, nil
}

// cpu sums the CPU time used so far by the mode's hosts and every process
// below them (their transports), and by the hosts alone, as /proc counts
// it (bench_cost.go).
func (m *rankMode) cpu() (all, hosts time.Duration, err error) {
	for _, h := range append(append([]*cluster.Host{}, m.set.Prefill...), m.set.Decode...) {
		total, own, err := treeCost(h.Pid())
		if err != nil {
			return 0, 0, fmt.Errorf("%s: CPU time: %w", h.Name, err)
		}
		all, hosts = all+total.cpu, hosts+own.cpu
	}
	return all, hosts, nil
}
