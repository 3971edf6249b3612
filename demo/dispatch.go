package demo

import (
	"context"
	"sync"
	"time"

	"github.com/custody-dev/custody/client"
)

// outcome is how one request ended on one host.
type outcome struct {
	ok     bool
	reason string
	// invalidOK: for a failed receive, every one of its blocks was listed
	// invalid or quarantined in the same report that failed it.
	invalidOK bool
	// quarantined are the blocks of a failed receive that never come back.
	quarantined map[uint32]bool
}

// dispatcher watches one host's finished reports and hands each request's outcome
// to whoever waits for it. It checks, for failed receives, that their blocks
// are reported invalid in the same reply.
type dispatcher struct {
	c    *client.Client
	pool uint32

	mu      sync.Mutex
	waiters map[string]chan outcome
	early   map[string]outcome
	blocks  map[string][]uint32 // a receive's blocks, to check invalid reports
	seen    map[string]int      // reports per request: must be exactly one
	quar    int
	err     error
}

func newDispatcher(c *client.Client, pool uint32) *dispatcher {
	return &dispatcher{c: c, pool: pool, waiters: map[string]chan outcome{}, early: map[string]outcome{}, blocks: map[string][]uint32{}, seen: map[string]int{}}
}

// expect registers a request before it is issued; blocks are its local
// blocks if it is a receive here.
func (d *dispatcher) expect(id string, blocks []uint32) <-chan outcome {
	ch := make(chan outcome, 1)
	d.mu.Lock()
	defer d.mu.Unlock()
	if blocks != nil {
		d.blocks[id] = blocks
	}
	if o, ok := d.early[id]; ok {
		delete(d.early, id)
		ch <- o
		return ch
	}
	d.waiters[id] = ch
	return ch
}

// run watches the host's finished reports until ctx ends. A broken stream
// is opened again where it stopped: the client resumes at its cursor, so no
// report is lost or handed over twice.
func (d *dispatcher) run(ctx context.Context) {
	for {
		err := d.c.WatchFinished(ctx, func(f client.Finished) error {
			d.deliver(f)
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		d.mu.Lock()
		d.err = err
		d.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond): // pacing before reconnecting to a host that went away
		}
	}
}

func (d *dispatcher) deliver(f client.Finished) {
	invalid, quarantined := map[uint32]bool{}, map[uint32]bool{}
	for _, b := range f.InvalidBlocks {
		if b.Pool == d.pool {
			invalid[b.Block] = true
		}
	}
	for _, b := range f.Quarantined {
		if b.Pool == d.pool {
			quarantined[b.Block] = true
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.quar += len(f.Quarantined)
	failed := map[string]string{}
	for _, x := range f.Failed {
		failed[x.Request] = x.Reason
	}
	report := func(id string, o outcome) {
		d.seen[id]++
		if ch, ok := d.waiters[id]; ok {
			delete(d.waiters, id)
			ch <- o
			return
		}
		d.early[id] = o
	}
	for _, id := range f.FinishedSending {
		report(id, outcome{ok: true})
	}
	for _, id := range f.FinishedRecving {
		reason, bad := failed[id]
		if !bad {
			report(id, outcome{ok: true})
			continue
		}
		o := outcome{reason: reason, invalidOK: true, quarantined: map[uint32]bool{}}
		for _, b := range d.blocks[id] {
			switch {
			case quarantined[b]:
				o.quarantined[b] = true
			case !invalid[b]:
				o.invalidOK = false
			}
		}
		delete(failed, id)
		report(id, o)
	}
	for id, reason := range failed { // failed sends
		report(id, outcome{reason: reason})
	}
}

// duplicates counts requests reported more than once.
func (d *dispatcher) duplicates() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.seen {
		if c > 1 {
			n++
		}
	}
	return n
}
