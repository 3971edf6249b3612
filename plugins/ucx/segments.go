package ucx

// appendSegment appends g to segs, merging it into the last segment when g
// continues it on both sides: local and remote addresses contiguous, the
// same memory handle and the same remote key. Contiguous descriptors (KV
// blocks laid out in the same order on both sides) then cost one UCX
// request, not one each; the bytes moved are the same.
func appendSegment(segs []segment, g segment) []segment {
	if n := len(segs); n > 0 {
		last := &segs[n-1]
		if last.memh == g.memh && last.rkey == g.rkey &&
			last.laddr+uintptr(last.size) == g.laddr &&
			last.raddr+last.size == g.raddr {
			last.size += g.size
			return segs
		}
	}
	return append(segs, g)
}
