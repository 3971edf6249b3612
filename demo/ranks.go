package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	enginev1 "github.com/custody-dev/custody/api/engine/v1"
	"github.com/custody-dev/custody/client"
	"github.com/custody-dev/custody/internal/drive"
)

// RanksSummary is what a run of RunRanks found.
type RanksSummary struct {
	Requests, OK, Failed int
	// UnionFailed counts requests that succeeded on some decode rank and
	// failed there all the same because another rank failed, timed out or
	// was lost.
	UnionFailed int
	// Disagreed counts requests that did not get the same outcome on every
	// live rank of the decode engine (must be 0).
	Disagreed int
	// Corrupted counts blocks whose bytes were wrong in a request reported
	// finished; InvalidMissing failed requests whose blocks were not all
	// reported invalid or quarantined in the reply that failed them.
	Corrupted, InvalidMissing int
	// Refused says how a rank started with another block size was refused
	// ("" when it was not: a failure of the run).
	Refused string
	// Poisoned lists each rank's poisoned pools at the end (only the
	// poison engine's ranks may have any).
	Poisoned map[string][]string
	// PoisonedPools counts the pools poisoned, summed over the poison
	// engine's ranks (2: one pool, poisoned on both, though only rank 0
	// quarantined a block); PoisonRefused the new requests on it refused
	// with FailedPrecondition (one per rank).
	PoisonedPools, PoisonRefused int
	// Leaks lists what a live host still held once every request was
	// reported, or a host that did not stop cleanly.
	Leaks []string
	// Faults are the rank-level faults injected.
	Faults  []string
	Bytes   int64
	Elapsed time.Duration
}

// Clean reports whether every check passed.
func (s *RanksSummary) Clean() bool {
	return s.Disagreed == 0 && s.Corrupted == 0 && s.InvalidMissing == 0 && s.Refused != "" &&
		s.PoisonedPools == 2 && s.PoisonRefused == 2 && len(s.Leaks) == 0
}

// Print writes the summary.
func (s *RanksSummary) Print(w io.Writer) {
	fmt.Fprintf(w, "ranks demo: %d requests over a prefill engine of 2 ranks and a decode engine of 2 ranks (each rank its own host and transport process, one embedded etcd) in %v\n", s.Requests, s.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "  ok %d, failed %d (union failures: %d succeeded on a rank and failed there because another rank failed), outcomes that differed between ranks: %d\n", s.OK, s.Failed, s.UnionFailed, s.Disagreed)
	fmt.Fprintf(w, "  bytes verified %d, corrupted blocks %d, failed without their invalid blocks %d\n", s.Bytes, s.Corrupted, s.InvalidMissing)
	for _, f := range s.Faults {
		fmt.Fprintf(w, "  fault: %s\n", f)
	}
	names := make([]string, 0, len(s.Poisoned))
	for name := range s.Poisoned {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  poisoned pools on %s: %v\n", name, s.Poisoned[name])
	}
	fmt.Fprintf(w, "  poisoned pools (summed over the poison engine's 2 ranks): %d; new requests on them refused with FailedPrecondition: %d\n", s.PoisonedPools, s.PoisonRefused)
	fmt.Fprintf(w, "  rank with another block size: %s\n", orNot(s.Refused))
	fmt.Fprintf(w, "  leaked resources %d\n", len(s.Leaks))
	for _, l := range s.Leaks {
		fmt.Fprintf(w, "    %s\n", l)
	}
}

func orNot(s string) string {
	if s == "" {
		return "NOT refused"
	}
	return "refused at startup: " + s
}

// RunRanks runs the demo over ranks: a prefill engine and a decode engine
// of two ranks each, one `custody serve` process per rank with its own fake
// transport process, agreeing through an etcd embedded in the prefill's
// rank 0. Each decode rank pulls its share of a request from both prefill
// ranks (heterogeneous TP). Rank-level faults: decode rank 1 fails some
// transfers while rank 0 succeeds; decode rank 0 stalls one until the hold
// cap; decode rank 1 is killed mid-request at the end; a third engine
// whose rank 1 has another block size must be refused at startup; and on a
// fourth engine, rank 0 holds a push receive whose producer never writes,
// which nothing can prove stopped (its fence reaches only the transfers it
// initiated): the block is quarantined there, and the pool is poisoned on
// both ranks. At the end every live host must hold nothing (the leak
// audit) and stop cleanly.
func RunRanks(ctx context.Context, o Options) (*RanksSummary, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if o.Transport != "fake" {
		return nil, errors.New("demo --ranks: only the fake transport injects the rank faults")
	}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp(drive.ShmDir(), "custody-ranks-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	etcd, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &RanksSummary{Requests: o.Requests, Poisoned: map[string][]string{}}
	const blocksPer = 2 // blocks each decode rank reads from each prefill rank
	spec := func(engine string, rank int, blocks, blockSize int, faults string) hostSpec {
		coord := map[string]any{"endpoints": []string{etcd}}
		if engine == "pre" && rank == 0 {
			coord = map[string]any{"embedded": map[string]any{"dir": dir + "/etcd", "listen": etcd}}
		} else if engine == "pre" {
			coord = map[string]any{"embedded": map[string]any{"listen": etcd}}
		}
		p := map[string]string{"seed": fmt.Sprint(o.Seed), "dir": dir}
		if faults != "" {
			p["fault"] = faults
		}
		return hostSpec{name: fmt.Sprintf("%s-%d", engine, rank), dir: dir, custody: o.Custody, transport: "fake", params: p,
			cap: time.Second, policy: "fence", blocks: blocks, blockSize: blockSize, logLevel: "warn",
			group: map[string]any{"engine": engine, "rank": rank, "size": 2, "coordinator": coord,
				"timeouts": map[string]any{"lease_ttl": "2s", "join": "20s"}}}
	}
	startEngine := func(specs ...hostSpec) ([]*hostProc, []error) {
		hs := make([]*hostProc, len(specs))
		errs := make([]error, len(specs))
		var wg sync.WaitGroup
		for i, sp := range specs {
			wg.Add(1)
			go func() { defer wg.Done(); hs[i], errs[i] = startHost(ctx, sp) }()
		}
		wg.Wait()
		return hs, errs
	}
	var all []*hostProc
	defer func() {
		for i := len(all) - 1; i >= 0; i-- {
			if all[i] != nil {
				_ = all[i].stop()
			}
		}
	}()
	started := func(hs []*hostProc, errs []error) error {
		all = append(all, hs...)
		return errors.Join(errs...)
	}
	preBlocks := o.Requests*2*blocksPer + 8 // blocks go back to the engine and are not reused here
	if err := started(startEngine(spec("pre", 0, preBlocks, o.BlockSize, ""), spec("pre", 1, preBlocks, o.BlockSize, ""))); err != nil {
		return s, fmt.Errorf("prefill engine: %w", err)
	}
	decBlocks := o.Requests*2*blocksPer + 8
	stallAt, failEvery := 3, 7
	dfaults := []string{fmt.Sprintf("stall,post=%d", stallAt), fmt.Sprintf("fail,after=0,post=%d", failEvery)}
	s.Faults = append(s.Faults, fmt.Sprintf("dec-0: post %d stalls until the hold cap (1s)", stallAt), fmt.Sprintf("dec-1: post %d fails while dec-0 succeeds", failEvery))
	dec, errs := startEngine(spec("dec", 0, decBlocks, o.BlockSize, dfaults[0]), spec("dec", 1, decBlocks, o.BlockSize, dfaults[1]))
	if err := started(dec, errs); err != nil {
		return s, fmt.Errorf("decode engine: %w", err)
	}
	pre := all[:2]
	for _, d := range dec {
		if err := d.c.ConnectPeer(ctx, "prefill", client.RemoteRank{Address: "engine:pre", Pool: "kv"}); err != nil {
			return s, fmt.Errorf("%s: connect prefill by name: %w", d.name, err)
		}
	}

	// A rank with another block size is refused, on every rank.
	_, berrs := startEngine(spec("bad", 0, 8, o.BlockSize, ""), spec("bad", 1, 8, 2*o.BlockSize, ""))
	if berrs[0] != nil && berrs[1] != nil {
		s.Refused = "both ranks exited (see bad-0.log, bad-1.log)"
		if raw, err := os.ReadFile(dir + "/bad-0.log"); err == nil && bytes.Contains(raw, []byte(`block_size`)) {
			s.Refused = "both ranks exited; rank 0 logs: " + firstLine(raw, "block_size")
		}
	}

	start := time.Now()
	killAt := o.Requests - 1
	for i := range o.Requests {
		id := fmt.Sprintf("req-%04d", i)
		if err := runRankRequest(ctx, s, o, pre, dec, id, i, blocksPer, i == killAt); err != nil {
			return s, err
		}
	}
	s.Elapsed = time.Since(start)

	// A block no rank can prove safe poisons its pool on every rank.
	pspec := func(rank int) hostSpec {
		sp := spec("psn", rank, 8, o.BlockSize, "")
		sp.params["fence"] = "initiated"
		return sp
	}
	psn, errs := startEngine(pspec(0), pspec(1))
	if err := started(psn, errs); err != nil {
		return s, fmt.Errorf("poison engine: %w", err)
	}
	if err := runPoison(ctx, s, psn); err != nil {
		return s, err
	}

	// The leak audit: once every live host has reported what it was
	// given, none holds anything; then each stops cleanly.
	live := []*hostProc{pre[0], pre[1], dec[0], psn[0], psn[1]}
	for _, h := range live {
		st, err := drained(ctx, h)
		if err != nil {
			return s, err
		}
		s.Poisoned[h.name] = st.GetPoisonedPools()
		if n := st.GetRequests() + st.GetInFlight() + st.GetRetained() + st.GetRetired() + st.GetJournal() + st.GetNativeHandles() + st.GetGroupHeld(); n > 0 {
			s.Leaks = append(s.Leaks, fmt.Sprintf("%s: %d requests, %d handles (%d retained), %d retired peers, %d journal entries, %d native handles, %d requests held for the other ranks",
				h.name, st.GetRequests(), st.GetInFlight(), st.GetRetained(), st.GetRetired(), st.GetJournal(), st.GetNativeHandles(), st.GetGroupHeld()))
		}
	}
	// Stopped in reverse order of start: the rank running etcd last.
	for i := len(live) - 1; i >= 0; i-- {
		if err := live[i].stop(); err != nil {
			s.Leaks = append(s.Leaks, err.Error())
		}
	}
	return s, nil
}

// drainWait bounds the wait for a host to report everything it was given:
// a request of the killed rank ends on the prefill ranks only when its
// lease (5 s) and the hold cap (1 s) have passed.
const drainWait = 30 * time.Second

// drained waits until h holds no request, handle or held report, or
// drainWait passed, and returns its last Status. It reads the reports it
// has not handed out yet, as an engine does each step.
func drained(ctx context.Context, h *hostProc) (*enginev1.StatusResponse, error) {
	deadline := time.Now().Add(drainWait)
	for {
		if _, err := h.c.GetFinished(ctx); err != nil {
			return nil, fmt.Errorf("%s: finished: %w", h.name, err)
		}
		st, err := h.c.Status(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: status: %w", h.name, err)
		}
		if st.GetRequests()+st.GetInFlight()+st.GetGroupHeld() == 0 || time.Now().After(deadline) {
			return st, nil
		}
		time.Sleep(10 * time.Millisecond) // pacing between polls, as an engine step does
	}
}

// runPoison makes rank 0 of the poison engine quarantine a block: a push
// receive from the prefill engine, whose ranks never write it. Its lease
// ends, and with a fence that reaches only the transfers it initiated
// nothing proves the producer stopped: at the hold cap the blocks are
// quarantined, and the pool is poisoned on both ranks. Then a new request
// on the pool, on each rank, must be refused with FailedPrecondition.
func runPoison(ctx context.Context, s *RanksSummary, psn []*hostProc) error {
	for _, h := range psn {
		if err := h.c.ConnectPeer(ctx, "prefill", client.RemoteRank{Address: "engine:pre", Pool: "kv"}); err != nil {
			return fmt.Errorf("%s: connect prefill by name: %w", h.name, err)
		}
	}
	h := psn[0]
	b, err := h.c.Alloc(ctx, h.poolID, 2)
	if err != nil {
		return fmt.Errorf("%s: alloc: %w", h.name, err)
	}
	const id = "poison-0"
	token := client.NewToken()
	for deadline := time.Now().Add(drainWait); ; {
		err := h.c.ExpectReceive(ctx, id, token, "prefill", h.poolID, b, 1, 100*time.Millisecond)
		if err == nil {
			break
		}
		if !errors.Is(err, client.ErrUnavailable) || time.Now().After(deadline) { // Unavailable: the peer's handshake runs
			return fmt.Errorf("%s: expect receive %s: %w", h.name, id, err)
		}
		time.Sleep(time.Millisecond) // pacing while the handshake runs
	}
	f, err := waitReport(ctx, h, id)
	if err != nil {
		return err
	}
	if len(f.Failed) == 0 || len(f.Quarantined) != len(b) {
		return fmt.Errorf("%s: %s was reported %+v, not failed with its %d blocks quarantined", h.name, id, f, len(b))
	}
	s.Faults = append(s.Faults, fmt.Sprintf("%s: push receive %s never written, its fence cannot reach it: %d blocks quarantined at the hold cap", h.name, id, len(f.Quarantined)))
	for _, h := range psn {
		// Rank 1 learns of the poison through its watch of the group.
		deadline := time.Now().Add(drainWait)
		var pools []string
		for len(pools) == 0 && time.Now().Before(deadline) {
			st, err := h.c.Status(ctx)
			if err != nil {
				return fmt.Errorf("%s: status: %w", h.name, err)
			}
			if pools = st.GetPoisonedPools(); len(pools) == 0 {
				time.Sleep(10 * time.Millisecond) // pacing between polls
			}
		}
		s.PoisonedPools += len(pools)
		_, aerr := h.c.Alloc(ctx, h.poolID, 1)
		serr := h.c.ExpectSend(ctx, "after-poison", client.NewToken(), "", h.poolID, []uint32{7}, 1, time.Second)
		if status.Code(aerr) == codes.FailedPrecondition && status.Code(serr) == codes.FailedPrecondition {
			s.PoisonRefused++
		} else {
			s.Faults = append(s.Faults, fmt.Sprintf("%s: new requests on the poisoned pool were answered %v and %v, not FailedPrecondition", h.name, aerr, serr))
		}
	}
	return nil
}

func firstLine(raw []byte, want string) string {
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.Contains(l, want) {
			if len(l) > 400 {
				l = l[:400] + "…"
			}
			return l
		}
	}
	return ""
}

// runRankRequest runs one logical pull: each prefill rank pins blocksPer
// blocks per decode rank, each decode rank reads its blocks from both
// prefill ranks. kill: decode rank 1 is killed once it has issued its part.
func runRankRequest(ctx context.Context, s *RanksSummary, o Options, pre, dec []*hostProc, id string, i, n int, kill bool) error {
	rng := rand.New(rand.NewPCG(o.Seed, uint64(i)))
	token := client.NewToken()        // one logical request: the same token on every rank
	src := make([][][]byte, len(pre)) // [prefill rank][block]
	pb := make([][]uint32, len(pre))
	for r, p := range pre {
		b, err := p.c.Alloc(ctx, p.poolID, n*len(dec))
		if err != nil {
			return fmt.Errorf("%s: alloc: %w", p.name, err)
		}
		pb[r] = b
		src[r] = make([][]byte, len(b))
		for k := range b {
			src[r][k] = make([]byte, o.BlockSize)
			for j := 0; j < o.BlockSize; j += 8 {
				v := rng.Uint64()
				copy(src[r][k][j:], []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24), byte(v >> 32), byte(v >> 40), byte(v >> 48), byte(v >> 56)})
			}
		}
		if err := p.writeBlocks(b, src[r], o.BlockSize); err != nil {
			return err
		}
		if err := p.c.ExpectSend(ctx, id, token, "", p.poolID, b, len(dec), 5*time.Second); err != nil {
			return fmt.Errorf("%s: expect send %s: %w", p.name, id, err)
		}
	}
	dst := make([][]uint32, len(dec))
	for q, d := range dec {
		b, err := d.c.Alloc(ctx, d.poolID, n*len(pre))
		if err != nil {
			return fmt.Errorf("%s: alloc: %w", d.name, err)
		}
		dst[q] = b
		var parts []client.Part
		for r := range pre {
			parts = append(parts, client.Part{Pool: d.poolID, Local: b[r*n : (r+1)*n], Rank: uint32(r), Remote: pb[r][q*n : (q+1)*n]})
		}
		if err := d.c.Read(ctx, id, token, "prefill", true, parts...); err != nil {
			return fmt.Errorf("%s: read %s: %w", d.name, id, err)
		}
	}
	live := dec
	if kill {
		_ = dec[1].cmd.Process.Signal(syscall.SIGKILL)
		s.Faults = append(s.Faults, fmt.Sprintf("dec-1 killed (SIGKILL) mid-request %s", id))
		live = dec[:1]
	}
	outcomes := make([]string, len(live))
	for q, d := range live {
		f, err := waitReport(ctx, d, id)
		if err != nil {
			return err
		}
		failed := len(f.Failed) > 0
		outcomes[q] = map[bool]string{false: "ok", true: "failed"}[failed]
		if failed {
			if strings.Contains(f.Failed[0].Reason, "failed on another rank") {
				s.UnionFailed++
			}
			if len(f.InvalidBlocks)+len(f.Quarantined) != len(dst[q]) {
				s.InvalidMissing++
			}
			continue
		}
		got, err := d.readBlocks(dst[q], o.BlockSize)
		if err != nil {
			return err
		}
		for r := range pre {
			for k := range n {
				if !bytes.Equal(got[r*n+k], src[r][q*n+k]) {
					s.Corrupted++
				}
				s.Bytes += int64(o.BlockSize)
			}
		}
	}
	for _, oc := range outcomes[1:] {
		if oc != outcomes[0] {
			s.Disagreed++
		}
	}
	if outcomes[0] == "ok" {
		s.OK++
	} else {
		s.Failed++
	}
	return nil
}

// waitReport polls d's finished reports until id is reported.
func waitReport(ctx context.Context, d *hostProc, id string) (client.Finished, error) {
	deadline := time.Now().Add(30 * time.Second)
	var acc client.Finished
	for {
		f, err := d.c.GetFinished(ctx)
		if err != nil {
			return acc, fmt.Errorf("%s: finished: %w", d.name, err)
		}
		// A failed receive is listed in FinishedRecving too (vLLM's
		// contract): look at the failures first.
		for _, x := range f.Failed {
			if x.Request == id {
				return client.Finished{Failed: []client.Failure{x}, InvalidBlocks: f.InvalidBlocks, Quarantined: f.Quarantined}, nil
			}
		}
		for _, x := range f.FinishedRecving {
			if x == id {
				return client.Finished{FinishedRecving: []string{id}}, nil
			}
		}
		if time.Now().After(deadline) {
			return acc, fmt.Errorf("%s: request %s not reported within 30s", d.name, id)
		}
		time.Sleep(time.Millisecond) // pacing between polls, as an engine step does
	}
}
