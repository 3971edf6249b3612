package core

import "container/heap"

// leaseEntry is one lease deadline (UnixNano) of a send or receive. The
// deadline lives here, not in the request, so that reads, which have no
// lease, do not pay for it.
type leaseEntry struct {
	at int64
	r  *request
}

// leaseHeap orders sends and receives by lease deadline, so each round pops
// only the leases that expired.
type leaseHeap []leaseEntry

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h leaseHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *leaseHeap) Push(v any)        { *h = append(*h, v.(leaseEntry)) }
func (h *leaseHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = leaseEntry{}
	*h = old[:len(old)-1]
	return e
}

func (h *leaseHeap) push(r *request, at int64) { heap.Push(h, leaseEntry{at, r}) }

// expireLeases marks every send or receive whose lease passed; tryFinish
// reports it once its handles are released.
func (c *Core) expireLeases() {
	for len(c.leases) > 0 && c.leases[0].at <= c.now {
		r := heap.Pop(&c.leases).(leaseEntry).r
		if r.flags&rReported == 0 {
			r.flags |= rLeaseOver
			c.markDirty(r)
		}
	}
}
