package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/custody-dev/custody/client"
	"github.com/custody-dev/custody/internal/cluster"
)

// reportWait bounds the wait for a pull's finished reports.
const reportWait = 30 * time.Second

// engines is a prefill and a decode engine of one or more ranks each (a
// host per rank) that the host benchmarks pull through, with a watcher of
// each host's reports and the blocks each worker pulls. Every decode rank
// knows the prefill engine as peer "prefill".
type engines struct {
	prefill, decode []*cluster.Host
	pre, dec        []*reports
	// src[r] are prefill rank r's blocks, dst[q] decode rank q's. With P
	// prefill and D decode ranks, worker w's request pins src[r][w*D+q]
	// on prefill rank r for decode rank q, which reads it into
	// dst[q][w*P+r].
	src, dst [][]uint32
	seq      atomic.Uint64
	// logs is where the hosts' logs are, named in a pull that got stuck.
	logs string
}

// newEngines watches every host's reports (poll: as newReports) until
// stop.
func newEngines(ctx context.Context, prefill, decode []*cluster.Host, poll time.Duration, logs string) *engines {
	e := &engines{prefill: prefill, decode: decode, logs: logs}
	for _, h := range prefill {
		e.pre = append(e.pre, newReports(ctx, h.Client, poll))
	}
	for _, h := range decode {
		e.dec = append(e.dec, newReports(ctx, h.Client, poll))
	}
	return e
}

func (e *engines) stop() {
	for _, r := range append(e.pre, e.dec...) {
		r.stop()
	}
}

// hosts are every host, prefill first.
func (e *engines) hosts() []*cluster.Host {
	return append(append([]*cluster.Host{}, e.prefill...), e.decode...)
}

// prepare allocates the blocks of workers workers.
func (e *engines) prepare(ctx context.Context, workers int) error {
	for _, hs := range []struct {
		hosts []*cluster.Host
		per   int
		to    *[][]uint32
	}{{e.prefill, len(e.decode), &e.src}, {e.decode, len(e.prefill), &e.dst}} {
		for _, h := range hs.hosts {
			n := hs.per * workers
			b, err := h.Client.Alloc(ctx, h.Pool, n)
			if err != nil {
				return fmt.Errorf("%s: alloc %d blocks: %w", h.Name, n, err)
			}
			*hs.to = append(*hs.to, b)
		}
	}
	return nil
}

// pull runs one logical request with worker w's blocks: ExpectSend on
// every prefill rank, then on every decode rank a Read of its block from
// each prefill rank (notify_producer). It returns the time from the first
// Read to the last decode rank's finished report, once every prefill rank
// reported it too, and the time from the first Read until the last
// returned (the Read calls' share of it).
func (e *engines) pull(ctx context.Context, prefix string, w int) (took, read time.Duration, err error) {
	id := fmt.Sprintf("%s-%d", prefix, e.seq.Add(1))
	var sent, recv []<-chan string
	for _, r := range e.pre {
		sent = append(sent, r.expect(id))
	}
	for _, r := range e.dec {
		recv = append(recv, r.expect(id))
	}
	np, nd := len(e.prefill), len(e.decode)
	token := client.NewToken() // the same on every rank: one logical request
	for r, p := range e.prefill {
		if err := p.Client.ExpectSend(ctx, id, token, "", p.Pool, e.src[r][w*nd:(w+1)*nd], nd, time.Minute); err != nil {
			return 0, 0, fmt.Errorf("%s: %s: expect send: %w", id, p.Name, err)
		}
	}
	start := time.Now()
	for q, d := range e.decode {
		parts := make([]client.Part, np)
		for r := range parts {
			parts[r] = client.Part{Pool: d.Pool, Local: e.dst[q][w*np+r : w*np+r+1], Rank: uint32(r), Remote: e.src[r][w*nd+q : w*nd+q+1]}
		}
		for {
			err := d.Client.Read(ctx, id, token, "prefill", true, parts...)
			if err == nil {
				break
			}
			if !errors.Is(err, client.ErrUnavailable) { // the peer's handshake runs
				return 0, 0, fmt.Errorf("%s: %s: read: %w", id, d.Name, err)
			}
			select {
			case <-ctx.Done():
				return 0, 0, ctx.Err()
			case <-time.After(time.Millisecond): // pacing while the handshake runs
			}
		}
	}
	read = time.Since(start)
	waitFor := append(append([]*cluster.Host{}, e.decode...), e.prefill...)
	stuck := time.NewTimer(reportWait)
	defer stuck.Stop()
	for i, ch := range append(recv, sent...) {
		select {
		case <-stuck.C:
			var held []string
			for _, h := range waitFor {
				if st, err := h.Client.Status(ctx); err == nil && st.GetRequests() > 0 {
					held = append(held, fmt.Sprintf("%s holds %d requests", h.Name, st.GetRequests()))
				}
			}
			return 0, 0, fmt.Errorf("%s: %s did not report it finished within %v (%s); see the hosts' logs in %s", id, waitFor[i].Name, reportWait, strings.Join(held, ", "), e.logs)
		case reason := <-ch:
			if i == len(recv)-1 {
				took = time.Since(start)
			}
			if reason != "" {
				return 0, 0, fmt.Errorf("%s failed: %s", id, reason)
			}
		case <-ctx.Done():
			return 0, 0, fmt.Errorf("%s: no finished report: %w", id, ctx.Err())
		}
	}
	return took, read, nil
}

// sequential runs n pulls one after another with worker 0's blocks: each
// pull's time and its Read calls' (as pull).
func (e *engines) sequential(ctx context.Context, prefix string, n int) (pulls, reads []time.Duration, err error) {
	pulls, reads = make([]time.Duration, 0, n), make([]time.Duration, 0, n)
	for range n {
		d, r, err := e.pull(ctx, prefix, 0)
		if err != nil {
			return nil, nil, err
		}
		pulls, reads = append(pulls, d), append(reads, r)
	}
	return pulls, reads, nil
}

// concurrent keeps n pulls in flight, one per worker, for d; it returns
// the time of each pull and how long the run took.
func (e *engines) concurrent(ctx context.Context, n int, d time.Duration) ([]time.Duration, time.Duration, error) {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		all  []time.Duration
		errs = make(chan error, n)
	)
	start := time.Now()
	deadline := start.Add(d)
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for time.Now().Before(deadline) {
				took, _, err := e.pull(ctx, "conc", w)
				if err != nil {
					errs <- err
					break
				}
				mine = append(mine, took)
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return nil, 0, err
	}
	return all, el, nil
}
