package core

import "container/heap"

// leaseHeap orders sends by lease deadline, so each round pops only the
// leases that expired.
type leaseHeap []*request

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].lease < h[j].lease }
func (h leaseHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *leaseHeap) Push(v any)        { *h = append(*h, v.(*request)) }
func (h *leaseHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return r
}

func (h *leaseHeap) push(r *request) { heap.Push(h, r) }

// expireLeases marks every send whose lease passed; tryFinish reports it
// once its handles are released.
func (c *Core) expireLeases() {
	for len(c.leases) > 0 && c.leases[0].lease <= c.now {
		r := heap.Pop(&c.leases).(*request)
		if r.flags&rReported == 0 {
			r.flags |= rLeaseOver
			c.markDirty(r)
		}
	}
}
