package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/custody-dev/custody/client"
	"github.com/custody-dev/custody/internal/drive"
)

// Options configure a demo run. Zero values mean the defaults.
type Options struct {
	// Custody is the custody binary to run hosts with (required).
	Custody string
	// Transport is "fake" (default), "ucx" or "nixl" (custody-transport-NAME
	// next to the custody binary).
	Transport string
	// Params are extra transport parameters for both hosts.
	Params map[string]string
	// Requests to run (default 160), Concurrency of them at once (default 8).
	Requests, Concurrency int
	// BlockSize in bytes (default 64 KiB).
	BlockSize int
	// Seed makes the request mix and the faults replay (default 1).
	Seed uint64
	// UnsafeEagerRelease is the negative control: the decode host releases
	// handles after a few milliseconds and hands their blocks back for reuse,
	// as the seeds' old code did.
	UnsafeEagerRelease bool
	// Dir keeps the hosts' configs, logs and pools (default: a temporary
	// directory, removed afterwards).
	Dir string
	// Kills is how many times a transport process is killed from outside
	// (SIGKILL), spread evenly over the run, alternating between the decode
	// and the prefill host. Zero means none for the fake, which crashes by
	// its fault rules, and one per host for other transports.
	Kills int
	// Soak runs long: the fake gets rules of every fault kind that fire
	// all along the run (not once per process), and blocks that passed
	// their check are audited again and freed once Window later requests
	// were checked, so that the pools stay small however many requests run.
	Soak bool
	// Window is how many checked requests keep their blocks for the
	// audit under Soak (default 64).
	Window int
}

// Summary is what a run found.
type Summary struct {
	Requests, OK, Failed int
	Pulls, Pushes        int
	Handles              int
	FailuresByReason     map[string]int
	Faults               map[string][]string
	Fences, Restarts     uint64
	Bytes                int64
	Elapsed              time.Duration
	// Corrupted counts blocks whose bytes were wrong when their request
	// finished or at the final audit.
	Corrupted int
	// InvalidMissing counts failed receives whose blocks were not all
	// reported invalid in the report that failed them.
	InvalidMissing int
	// Duplicates counts requests reported more than once.
	Duplicates int
	// Lost counts requests with no report within a minute.
	Lost int
	// Kills counts transport processes killed from outside (SIGKILL).
	Kills int
	// Fired counts, per host and fault kind, how often the fake's fault
	// rules fired (from its fault_log), crashes included.
	Fired map[string]map[string]int
	// Quarantined blocks, never handed back.
	Quarantined int
	// Leaks lists what a host still held at the end.
	Leaks []string
}

// Clean reports whether the run found no corruption, no missing invalid
// report, no duplicate report and no leak.
func (s *Summary) Clean() bool {
	return s.Corrupted == 0 && s.InvalidMissing == 0 && s.Duplicates == 0 && s.Lost == 0 && len(s.Leaks) == 0
}

func (o *Options) defaults() error {
	if o.Custody == "" {
		return errors.New("demo: the custody binary is required")
	}
	if o.Transport == "" {
		o.Transport = "fake"
	}
	switch o.Transport {
	case "fake", "ucx", "nixl":
	default:
		return fmt.Errorf("demo: transport %q: want fake, ucx or nixl", o.Transport)
	}
	if o.Requests == 0 {
		o.Requests = 160
	}
	if o.Concurrency == 0 {
		o.Concurrency = 8
	}
	if o.BlockSize == 0 {
		o.BlockSize = 64 << 10
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Window == 0 {
		o.Window = 64
	}
	if o.Requests < 0 || o.Concurrency < 0 || o.BlockSize < 0 || o.Kills < 0 || o.Window < 0 {
		return errors.New("demo: requests, concurrency, block size, kills and window must be positive")
	}
	if o.Kills == 0 && o.Transport != "fake" {
		o.Kills = 2 // the fake crashes by its fault rules; others are killed, once each host
	}
	if o.Kills > o.Requests {
		return fmt.Errorf("demo: %d kills for %d requests: at most one kill per request", o.Kills, o.Requests)
	}
	return nil
}

// faults are the fake's fault rules per host: every kind at least once. The
// decode host reads (pull) and is written into (push); the prefill host is
// read from and writes.
func faults(unsafe bool) map[string][]string {
	decode := []string{
		"fail,after=1,post=3",
		"disconnect,after=1,post=7",
		"release-fail,count=2,post=11",
		"poll-fail,count=3,post=15",
		"stall,for=300ms,prob=0.08",
		"stall,post=60",
		"prepare-fail,rank=1",
		"notif-drop,prob=0.05",
		"notif-delay,for=100ms,prob=0.05",
	}
	if unsafe {
		decode = []string{"stall,for=300ms,prob=0.3"}
	}
	prefill := []string{
		"load-peer-fail,rank=0",
		"fail,after=0,post=5",
		"crash,at=post,n=20",
	}
	if unsafe {
		prefill = nil
	}
	return map[string][]string{"decode": decode, "prefill": prefill}
}

// Run runs the demo and returns its summary; the error is for a run that
// could not be carried out (hosts that did not start, engine calls that
// failed unexpectedly), not for what the checks found.
func Run(ctx context.Context, o Options) (*Summary, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp(drive.ShmDir(), "custody-demo-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	s := &Summary{Requests: o.Requests, FailuresByReason: map[string]int{}, Faults: map[string][]string{}}
	spec := func(name string, blocks int) hostSpec {
		p := map[string]string{}
		for k, v := range o.Params {
			p[k] = v
		}
		hs := hostSpec{name: name, dir: dir, custody: o.Custody, transport: o.Transport, params: p,
			cap: time.Second, policy: "fence", blocks: blocks, blockSize: o.BlockSize, logLevel: "warn"}
		if o.Transport == "fake" {
			p["seed"] = fmt.Sprint(o.Seed)
			p["dir"] = dir
			p["fault_log"] = filepath.Join(dir, name+".faults")
			f := faults(o.UnsafeEagerRelease)[name]
			if o.Soak {
				f = soakFaults()[name]
			}
			if len(f) > 0 {
				p["fault"] = faultParam(f...)
				s.Faults[name] = f
			}
		}
		if o.UnsafeEagerRelease && name == "decode" {
			hs.cap, hs.policy = 20*time.Millisecond, "release-and-reuse"
		}
		return hs
	}
	perReq := 6
	prefill, err := startHost(ctx, spec("prefill", o.Concurrency*perReq*2))
	if err != nil {
		return nil, err
	}
	defer prefill.stop()
	keep := o.Requests // requests whose blocks stay for the final audit
	if o.Soak {
		keep = o.Window
	}
	// Quarantined blocks never come back: a soak leaves room for some.
	decode, err := startHost(ctx, spec("decode", keep*perReq+o.Concurrency*perReq*2))
	if err != nil {
		return nil, err
	}
	defer decode.stop()
	if err := decode.c.ConnectPeer(ctx, "prefill", client.RemoteRank{Address: prefill.metaAddr, Pool: "kv"}); err != nil {
		return nil, fmt.Errorf("decode: connect prefill: %w", err)
	}
	if err := prefill.c.ConnectPeer(ctx, "decode", client.RemoteRank{Address: decode.metaAddr, Pool: "kv"}); err != nil {
		return nil, fmt.Errorf("prefill: connect decode: %w", err)
	}

	r := &runner{o: o, s: s, prefill: prefill, decode: decode,
		pd: newDispatcher(prefill.c, prefill.poolID), dd: newDispatcher(decode.c, decode.poolID)}
	dctx, stopDispatch := context.WithCancel(ctx)
	var dwg sync.WaitGroup
	for _, d := range []*dispatcher{r.pd, r.dd} {
		dwg.Add(1)
		go func() { defer dwg.Done(); d.run(dctx) }()
	}
	start := time.Now()
	err = r.runAll(ctx)
	s.Elapsed = time.Since(start)
	stopDispatch()
	dwg.Wait()
	if err != nil {
		return s, err
	}
	r.audit()
	if o.Transport == "fake" {
		if s.Fired, err = firedFaults(dir); err != nil {
			return s, err
		}
	}
	s.Duplicates = r.pd.duplicates() + r.dd.duplicates()
	s.Quarantined = r.pd.quar + r.dd.quar
	for _, h := range []*hostProc{prefill, decode} {
		st, err := h.c.Status(ctx)
		if err != nil {
			return s, fmt.Errorf("%s: status: %w", h.name, err)
		}
		s.Fences += st.GetFences()
		s.Restarts += st.GetTransportRestarts()
		if n := st.GetRequests() + st.GetInFlight() + st.GetRetained() + st.GetRetired() + st.GetJournal() + st.GetNativeHandles(); n > 0 {
			s.Leaks = append(s.Leaks, fmt.Sprintf("%s: %d requests, %d handles (%d retained), %d retired peers, %d journal entries, %d native handles",
				h.name, st.GetRequests(), st.GetInFlight(), st.GetRetained(), st.GetRetired(), st.GetJournal(), st.GetNativeHandles()))
		}
	}
	for _, h := range []*hostProc{decode, prefill} {
		if err := h.stop(); err != nil {
			s.Leaks = append(s.Leaks, err.Error())
		}
	}
	return s, nil
}

// runner carries one run's state.
type runner struct {
	o               Options
	s               *Summary
	prefill, decode *hostProc
	pd, dd          *dispatcher

	mu   sync.Mutex
	kept []kept // blocks that passed their check, audited again at the end
}

type kept struct {
	id     string
	blocks []uint32
	data   [][]byte
}

func (r *runner) runAll(ctx context.Context) error {
	ids := make(chan int)
	errs := make(chan error, r.o.Concurrency)
	var wg sync.WaitGroup
	for w := 0; w < r.o.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ids {
				if err := r.one(ctx, i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var err error
feed:
	for i := 0; i < r.o.Requests; i++ {
		select {
		case ids <- i:
		case err = <-errs:
			break feed
		}
	}
	close(ids)
	wg.Wait()
	close(errs)
	if err == nil {
		err = <-errs
	}
	return err
}

// one runs request i: a pull two times in three, else a push, of 1 to 6
// blocks in 1 to 3 parts.
func (r *runner) one(ctx context.Context, i int) error {
	// Kills land at even intervals, alternating decode and prefill: with
	// two, a third and two thirds in.
	for k := 0; k < r.o.Kills; k++ {
		if i == (k+1)*r.o.Requests/(r.o.Kills+1) {
			h := r.decode
			if k%2 == 1 {
				h = r.prefill
			}
			r.killTransport(ctx, h, i)
		}
	}
	rng := rand.New(rand.NewPCG(r.o.Seed, uint64(i)))
	n := 1 + rng.IntN(6)
	parts := 1 + rng.IntN(min(3, n))
	id := fmt.Sprintf("req-%04d", i)
	var err error
	if i%3 != 2 {
		err = r.pull(ctx, id, n, parts, rng)
	} else {
		err = r.push(ctx, id, n, parts, rng)
	}
	if errors.Is(err, errLost) {
		// Counted, not fatal: the run goes on and reports how many.
		r.count(func(s *Summary) { s.Lost++ })
		return nil
	}
	return err
}

// killTransport sends SIGKILL to h's transport process: the crash fault for
// transports that cannot inject one themselves.
// A host between two transport processes (restarting after a crash) has
// none to kill: the kill waits, up to 10 s, for the next one.
func (r *runner) killTransport(ctx context.Context, h *hostProc, i int) {
	var pid int64
	for deadline := time.Now().Add(10 * time.Second); pid == 0 && time.Now().Before(deadline); {
		if st, err := h.c.Status(ctx); err == nil && st.GetTransportPid() != 0 {
			pid = st.GetTransportPid()
			break
		}
		time.Sleep(10 * time.Millisecond) // a transport restarts in milliseconds
	}
	if pid == 0 {
		return
	}
	if syscall.Kill(int(pid), syscall.SIGKILL) == nil {
		r.count(func(s *Summary) {
			s.Kills++
			if !r.o.Soak {
				s.Faults[h.name] = append(s.Faults[h.name], fmt.Sprintf("transport killed (SIGKILL) at request %d", i))
			}
		})
	}
}

// split cuts local and remote block lists into parts transfers.
func split(pool uint32, local, remote []uint32, parts int) []client.Part {
	out := make([]client.Part, 0, parts)
	per := (len(local) + parts - 1) / parts
	for lo := 0; lo < len(local); lo += per {
		hi := min(lo+per, len(local))
		out = append(out, client.Part{Pool: pool, Local: local[lo:hi], Remote: remote[lo:hi]})
	}
	return out
}

func (r *runner) randomBlocks(rng *rand.Rand, n int) [][]byte {
	data := make([][]byte, n)
	for i := range data {
		data[i] = make([]byte, r.o.BlockSize)
		for k := 0; k < len(data[i]); k += 8 {
			v := rng.Uint64()
			for j := 0; j < 8 && k+j < len(data[i]); j++ {
				data[i][k+j] = byte(v >> (8 * j))
			}
		}
	}
	return data
}

// retry runs an engine call until it succeeds or fails with something other
// than Unavailable (a transport restarting) or ResourceExhausted.
func retry(ctx context.Context, call func(ctx context.Context) error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := call(cctx)
		cancel()
		if err == nil || status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond) // a transport restarts in milliseconds
	}
}

func (r *runner) alloc(ctx context.Context, h *hostProc, n int) ([]uint32, error) {
	var b []uint32
	err := retry(ctx, func(ctx context.Context) (err error) {
		b, err = h.c.Alloc(ctx, h.poolID, n)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: alloc %d blocks: %w", h.name, n, err)
	}
	return b, nil
}

// source takes n prefill blocks and fills them with random bytes.
func (r *runner) source(ctx context.Context, n int, rng *rand.Rand) ([]uint32, [][]byte, error) {
	pb, err := r.alloc(ctx, r.prefill, n)
	if err != nil {
		return nil, nil, err
	}
	data := r.randomBlocks(rng, n)
	return pb, data, r.prefill.writeBlocks(pb, data, r.o.BlockSize)
}

func (r *runner) pull(ctx context.Context, id string, n, parts int, rng *rand.Rand) error {
	pb, data, err := r.source(ctx, n, rng)
	if err != nil {
		return err
	}
	sent := r.pd.expect(id, nil)
	token := client.NewToken()
	if err := retry(ctx, func(ctx context.Context) error {
		return r.prefill.c.ExpectSend(ctx, id, token, "", r.prefill.poolID, pb, 1, 2*time.Second)
	}); err != nil {
		return fmt.Errorf("%s: expect send: %w", id, err)
	}
	db, err := r.alloc(ctx, r.decode, n)
	if err != nil {
		return err
	}
	recv := r.dd.expect(id, db)
	if err := retry(ctx, func(ctx context.Context) error {
		return r.decode.c.Read(ctx, id, token, "prefill", true, split(r.decode.poolID, db, pb, parts)...)
	}); err != nil {
		return fmt.Errorf("%s: read: %w", id, err)
	}
	r.count(func(s *Summary) { s.Pulls++; s.Handles += parts })
	if err := r.finishReceive(ctx, id, r.decode, db, data, recv); err != nil {
		return err
	}
	if _, err := wait(ctx, id, sent); err != nil {
		return err
	}
	return r.free(ctx, r.prefill, pb)
}

func (r *runner) push(ctx context.Context, id string, n, parts int, rng *rand.Rand) error {
	db, err := r.alloc(ctx, r.decode, n)
	if err != nil {
		return err
	}
	recv := r.dd.expect(id, db)
	token := client.NewToken()
	if err := retry(ctx, func(ctx context.Context) error {
		return r.decode.c.ExpectReceive(ctx, id, token, "prefill", r.decode.poolID, db, 1, 2*time.Second)
	}); err != nil {
		return fmt.Errorf("%s: expect receive: %w", id, err)
	}
	pb, data, err := r.source(ctx, n, rng)
	if err != nil {
		return err
	}
	sent := r.pd.expect(id, nil)
	if err := retry(ctx, func(ctx context.Context) error {
		return r.prefill.c.Write(ctx, id, token, "decode", 1, time.Second, split(r.prefill.poolID, pb, db, parts)...)
	}); err != nil {
		return fmt.Errorf("%s: write: %w", id, err)
	}
	r.count(func(s *Summary) { s.Pushes++; s.Handles += parts })
	// The consumer's outcome is the request's: its blocks hold the bytes, or
	// come back invalid once no write can reach them.
	if err := r.finishReceive(ctx, id, r.decode, db, data, recv); err != nil {
		return err
	}
	if _, err := wait(ctx, id, sent); err != nil {
		return err
	}
	return r.free(ctx, r.prefill, pb)
}

// finishReceive waits for a receive's outcome and checks it: the bytes when
// it finished, the invalid report when it failed.
func (r *runner) finishReceive(ctx context.Context, id string, h *hostProc, blocks []uint32, data [][]byte, ch <-chan outcome) error {
	o, err := wait(ctx, id, ch)
	if err != nil {
		return err
	}
	if o.ok {
		return r.check(ctx, id, h, blocks, data)
	}
	r.failed(o.reason)
	if !o.invalidOK {
		r.count(func(s *Summary) { s.InvalidMissing++ })
	}
	back := blocks[:0:0]
	for _, b := range blocks {
		if !o.quarantined[b] { // quarantined blocks never come back
			back = append(back, b)
		}
	}
	if len(back) == 0 {
		return nil
	}
	return r.free(ctx, h, back)
}

// check verifies a finished request's blocks and keeps them for the audit.
func (r *runner) check(ctx context.Context, id string, h *hostProc, blocks []uint32, data [][]byte) error {
	got, err := h.readBlocks(blocks, r.o.BlockSize)
	if err != nil {
		return err
	}
	bad := 0
	for i := range data {
		if !bytes.Equal(got[i], data[i]) {
			bad++
		}
	}
	r.count(func(s *Summary) {
		s.OK++
		s.Corrupted += bad
		s.Bytes += int64(len(blocks) * r.o.BlockSize)
	})
	r.mu.Lock()
	r.kept = append(r.kept, kept{id: id, blocks: blocks, data: data})
	var old []kept
	if r.o.Soak && len(r.kept) > r.o.Window {
		old = slices.Clone(r.kept[:len(r.kept)-r.o.Window])
		r.kept = slices.Delete(r.kept, 0, len(old))
	}
	r.mu.Unlock()
	// Under Soak, blocks checked Window requests ago are audited once more
	// and go back to the engine for reuse.
	for _, k := range old {
		if bad := r.auditOne(k); bad > 0 {
			r.count(func(s *Summary) { s.Corrupted += bad })
		}
		if err := r.free(ctx, r.decode, k.blocks); err != nil {
			return err
		}
	}
	return nil
}

// audit reads every kept block again: a transfer released too early may have
// written into it after its request was checked.
func (r *runner) audit() {
	for _, k := range r.kept {
		r.s.Corrupted += r.auditOne(k)
	}
}

// auditOne reads k's blocks again and counts those that changed.
func (r *runner) auditOne(k kept) int {
	got, err := r.decode.readBlocks(k.blocks, r.o.BlockSize)
	if err != nil {
		return len(k.blocks)
	}
	bad := 0
	for i := range k.data {
		if !bytes.Equal(got[i], k.data[i]) {
			bad++
		}
	}
	return bad
}

func (r *runner) free(ctx context.Context, h *hostProc, blocks []uint32) error {
	if err := retry(ctx, func(ctx context.Context) error { return h.c.Free(ctx, h.poolID, blocks) }); err != nil {
		return fmt.Errorf("%s: free: %w", h.name, err)
	}
	return nil
}

func (r *runner) failed(reason string) {
	r.count(func(s *Summary) { s.Failed++; s.FailuresByReason[classify(reason)]++ })
}

func (r *runner) count(f func(*Summary)) {
	r.mu.Lock()
	f(r.s)
	r.mu.Unlock()
}

// errLost is a request's report that never came.
var errLost = errors.New("no report within 60s")

func wait(ctx context.Context, id string, ch <-chan outcome) (outcome, error) {
	select {
	case o := <-ch:
		return o, nil
	case <-time.After(60 * time.Second):
		return outcome{}, fmt.Errorf("%s: %w", id, errLost)
	case <-ctx.Done():
		return outcome{}, ctx.Err()
	}
}

// classify names a failure reason by its kind.
func classify(reason string) string {
	for _, k := range []string{"hold cap", "fenced", "REMOTE_DISCONNECT", "peer removed", "lease", "incompatible", "PLUGIN_SHUTDOWN", "BACKEND"} {
		if strings.Contains(reason, k) {
			return k
		}
	}
	return "other"
}

// Print writes the summary.
func (s *Summary) Print(w interface{ Write([]byte) (int, error) }) {
	fmt.Fprintf(w, "requests   %d (%d pulls, %d pushes, %d transfer handles)\n", s.Requests, s.Pulls, s.Pushes, s.Handles)
	fmt.Fprintf(w, "ok         %d\nfailed     %d\n", s.OK, s.Failed)
	reasons := make([]string, 0, len(s.FailuresByReason))
	for k := range s.FailuresByReason {
		reasons = append(reasons, k)
	}
	sort.Strings(reasons)
	for _, k := range reasons {
		fmt.Fprintf(w, "  %-20s %d\n", k, s.FailuresByReason[k])
	}
	for _, h := range []string{"prefill", "decode"} {
		for _, f := range s.Faults[h] {
			fmt.Fprintf(w, "fault      %-8s %s\n", h, f)
		}
	}
	for _, h := range []string{"prefill", "decode"} {
		if len(s.Fired[h]) == 0 {
			continue
		}
		var kinds []string
		for k, n := range s.Fired[h] {
			kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
		}
		sort.Strings(kinds)
		fmt.Fprintf(w, "fired      %-8s %s\n", h, strings.Join(kinds, " "))
	}
	fmt.Fprintf(w, "kills      %d (SIGKILL from outside)\n", s.Kills)
	fmt.Fprintf(w, "fences     %d (transport restarts %d)\n", s.Fences, s.Restarts)
	mbs := float64(s.Bytes) / s.Elapsed.Seconds() / 1e6
	fmt.Fprintf(w, "bytes      %d verified in %v (%.1f MB/s)\n", s.Bytes, s.Elapsed.Round(time.Millisecond), mbs)
	fmt.Fprintf(w, "quarantined blocks %d\n", s.Quarantined)
	fmt.Fprintf(w, "corrupted blocks   %d\n", s.Corrupted)
	fmt.Fprintf(w, "missing invalid    %d\n", s.InvalidMissing)
	fmt.Fprintf(w, "duplicate reports  %d\n", s.Duplicates)
	fmt.Fprintf(w, "lost reports       %d\n", s.Lost)
	fmt.Fprintf(w, "leaked resources   %d\n", len(s.Leaks))
	for _, l := range s.Leaks {
		fmt.Fprintf(w, "  %s\n", l)
	}
}
