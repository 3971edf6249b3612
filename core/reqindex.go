package core

import "iter"

// reqIndex finds every request not yet reported by its id: a hash table of
// chains threaded through the requests themselves (each keeps its
// successor and the address of the pointer that points to it; a resize
// hashes every id again).
// Removing a finished request, once per request in the Poll round that
// reports it, is then two stores and no search: a hash map's delete would
// read the id's bytes and probe the table, cache misses the round pays per
// finished request at 100000 in flight. The table doubles or halves with
// what is in flight, so at a steady number in flight it is never rebuilt.
//
// The hash is fixed, not seeded per process, so that the same inputs give
// the same order of requests (and so of Failed entries and Cancel work) in
// every run. Request ids come from the engine the Core serves, which gains
// nothing by choosing colliding ids: it would only slow itself.
type reqIndex struct {
	buckets []*request // power of two
	n       int
}

const minReqBuckets = 1024

func newReqIndex() reqIndex {
	return reqIndex{buckets: make([]*request, minReqBuckets)}
}

func (ix *reqIndex) hash(id RequestID) uint64 { return hashID(string(id)) }

// hashID is FNV-1a over the id's bytes, finished with splitmix64's mixer so
// that the low bits, which pick the bucket, depend on every byte.
func hashID(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

func (ix *reqIndex) bucket(h uint64) **request { return &ix.buckets[h&uint64(len(ix.buckets)-1)] }

// get returns the request of id, or nil.
func (ix *reqIndex) get(id RequestID) *request {
	for r := *ix.bucket(ix.hash(id)); r != nil; r = r.next {
		if r.id == id {
			return r
		}
	}
	return nil
}

// add indexes r, whose id no indexed request has.
func (ix *reqIndex) add(r *request) {
	if ix.n >= len(ix.buckets) {
		ix.resize(2 * len(ix.buckets))
	}
	ix.link(r)
	ix.n++
}

func (ix *reqIndex) link(r *request) {
	b := ix.bucket(ix.hash(r.id))
	r.next, r.pprev = *b, b
	if r.next != nil {
		r.next.pprev = &r.next
	}
	*b = r
}

// remove drops r from the index; removing one that is not indexed (a
// request finished twice, which must never happen) changes nothing, so the
// second report is caught by whoever counts reports, not by a crash here.
func (ix *reqIndex) remove(r *request) {
	if r.pprev == nil {
		return
	}
	*r.pprev = r.next
	if r.next != nil {
		r.next.pprev = r.pprev
	}
	r.next, r.pprev = nil, nil
	ix.n--
}

// shrink halves the table when it is mostly empty, so memory follows what
// is in flight. Call it outside any iteration (all).
func (ix *reqIndex) shrink() {
	if len(ix.buckets) > minReqBuckets && 8*ix.n < len(ix.buckets) {
		ix.resize(len(ix.buckets) / 2)
	}
}

// resize relinks every request into a table of n buckets.
func (ix *reqIndex) resize(n int) {
	old := ix.buckets
	ix.buckets = make([]*request, n)
	for _, r := range old {
		for r != nil {
			next := r.next
			ix.link(r)
			r = next
		}
	}
}

func (ix *reqIndex) len() int { return ix.n }

// all yields every indexed request, in no particular order; removing the
// yielded one is allowed, adding one is not.
func (ix *reqIndex) all() iter.Seq[*request] {
	return func(yield func(*request) bool) {
		buckets := ix.buckets
		for i := range buckets {
			for r := buckets[i]; r != nil; {
				next := r.next
				if !yield(r) {
					return
				}
				r = next
			}
		}
	}
}
