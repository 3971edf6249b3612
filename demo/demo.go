package demo

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/custody-dev/custody/internal/cluster"
	"github.com/custody-dev/custody/sdk/plugin/agent"
)

// Run runs the demo and returns its summary; the error is for a run that
// could not be carried out (hosts that did not start, engine calls that
// failed unexpectedly), not for what the checks found.
func Run(ctx context.Context, o Options) (*Summary, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp(agent.Dir(), "custody-demo-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	s := &Summary{Requests: o.Requests, FailuresByReason: map[string]int{}, Faults: map[string][]string{}}
	spec := func(name string, blocks int) cluster.Spec {
		p := maps.Clone(o.Params)
		if p == nil {
			p = map[string]string{}
		}
		hs := cluster.Spec{Name: name, Dir: dir, Custody: o.Custody, Transport: o.Transport, Params: p,
			Cap: time.Second, Policy: "fence", Blocks: blocks, BlockSize: o.BlockSize, LogLevel: "warn"}
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
			hs.Cap, hs.Policy = 20*time.Millisecond, "release-and-reuse"
		}
		return hs
	}
	perReq := 6
	keep := o.Requests // requests whose blocks stay for the final audit
	if o.Soak {
		keep = o.Window
	}
	// Quarantined blocks never come back: a soak leaves room for some.
	pair, err := cluster.StartPairOf(ctx, spec("prefill", o.Concurrency*perReq*2), spec("decode", keep*perReq+o.Concurrency*perReq*2))
	if err != nil {
		return nil, err
	}
	defer pair.Stop()
	prefill, decode := pair.Prefill, pair.Decode

	r := &runner{o: o, s: s, prefill: prefill, decode: decode,
		pd: newDispatcher(prefill.Client, prefill.Pool), dd: newDispatcher(decode.Client, decode.Pool)}
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
	for _, h := range []*cluster.Host{prefill, decode} {
		st, err := h.Client.Status(ctx)
		if err != nil {
			return s, fmt.Errorf("%s: status: %w", h.Name, err)
		}
		s.Fences += st.GetFences()
		s.Restarts += st.GetTransportRestarts()
		if n := st.GetRequests() + st.GetInFlight() + st.GetRetained() + st.GetRetired() + st.GetJournal() + st.GetNativeHandles(); n > 0 {
			s.Leaks = append(s.Leaks, fmt.Sprintf("%s: %d requests, %d handles (%d retained), %d retired peers, %d journal entries, %d native handles",
				h.Name, st.GetRequests(), st.GetInFlight(), st.GetRetained(), st.GetRetired(), st.GetJournal(), st.GetNativeHandles()))
		}
	}
	for _, h := range []*cluster.Host{decode, prefill} {
		if err := h.Stop(); err != nil {
			s.Leaks = append(s.Leaks, err.Error())
		}
	}
	return s, nil
}

// runner carries one run's state.
type runner struct {
	o               Options
	s               *Summary
	prefill, decode *cluster.Host
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
func (r *runner) killTransport(ctx context.Context, h *cluster.Host, i int) {
	var pid int64
	for deadline := time.Now().Add(10 * time.Second); pid == 0 && time.Now().Before(deadline); {
		if st, err := h.Client.Status(ctx); err == nil && st.GetTransportPid() != 0 {
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
				s.Faults[h.Name] = append(s.Faults[h.Name], fmt.Sprintf("transport killed (SIGKILL) at request %d", i))
			}
		})
	}
}
