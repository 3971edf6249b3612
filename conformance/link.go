package conformance

import "github.com/custody-dev/custody/sdk"

// link is a ready path for data from agent a to agent b: a region on each,
// a's peer for b, and a's local and remote dlists each with one descriptor
// covering the whole region.
type link struct {
	a, b     *agent
	peer     sdk.PeerID
	src, dst *region // src on a, dst on b
	ld, rd   sdk.DlistID
}

// link starts a pair of agents and connects them with regions of size
// bytes.
func (e *env) link(size uint64) *link {
	e.t.Helper()
	a, b := e.pair()
	return e.linkBetween(a, b, size)
}

// linkBetween connects agents a and b with regions of size bytes.
func (e *env) linkBetween(a, b *agent, size uint64) *link {
	e.t.Helper()
	l := &link{a: a, b: b, src: a.region(size), dst: b.region(size)}
	l.peer = a.loadPeer(b)
	l.ld = a.dlist(0, l.src.desc(0, size))
	l.rd = a.dlist(l.peer, l.dst.desc(0, size))
	return l
}

// spec is a post of op between the two whole-region descriptors.
func (l *link) spec(op sdk.Op) sdk.PostSpec {
	return sdk.PostSpec{Op: op, Local: l.ld, LocalIndices: []uint32{0}, Remote: l.rd, RemoteIndices: []uint32{0}}
}

// expectBytes fails the check unless region r holds want at off. It reads
// the last bytes first: a transport that reports DONE before its last chunk
// lands is caught there, before it has time to finish.
func expectBytes(r *region, off uint64, want []byte, what string) bool {
	r.a.t.Helper()
	n := uint64(len(want))
	tail := min(n, 4096)
	if got := r.read(off+n-tail, tail); firstDiff(got, want[n-tail:]) >= 0 {
		i := firstDiff(got, want[n-tail:])
		r.a.t.Errorf("%s: region %d of agent %q differs at byte %d of %d (last bytes checked first): got %#02x, want %#02x",
			what, r.ID, r.a.name, n-tail+uint64(i), n, got[i], want[n-tail+uint64(i)])
		return false
	}
	got := r.read(off, n)
	if i := firstDiff(got, want); i >= 0 {
		r.a.t.Errorf("%s: region %d of agent %q differs at byte %d of %d: got %#02x, want %#02x",
			what, r.ID, r.a.name, i, n, got[i], want[i])
		return false
	}
	return true
}
