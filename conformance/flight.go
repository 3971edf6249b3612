package conformance

import (
	"math/bits"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// Sizing of the transfers a check needs still in flight (release of a
// running handle, cancel, the fence, a notification that must not come):
// the suite measures the transport's bandwidth, starts at the size it moves
// in flightTarget and doubles up to flightCap, so that a fast NIC is held
// to these rules as thoroughly as the fake.
const (
	// flightTarget is how long the first size tried runs alone at the
	// measured bandwidth; flightWorkers transfers share it at once.
	flightTarget = 32 * time.Millisecond
	// flightMin is the smallest size tried.
	flightMin = 64 << 10
	// flightProbe is the WRITE that measures the bandwidth.
	flightProbe = 4 << 20
	// flightWorkers is how many transfers of one size run at once, each
	// into a destination slot of its own.
	flightWorkers = 4
)

// flightCap is the largest transfer the suite grows to: its region size
// (bigTransfer), or Limits.MaxTransferBytes when that is smaller.
func (e *env) flightCap() uint64 {
	c := uint64(bigTransfer)
	if m := e.desc.Limits.MaxTransferBytes; m > 0 && m < c {
		c = m
	}
	return c
}

// flight is a path for flightWorkers WRITEs of n bytes each from a to b:
// one source region of n bytes holding want, and one destination slot of n
// bytes per worker, each with dlists of its own.
type flight struct {
	e    *env
	a, b *agent
	peer sdk.PeerID
	n    uint64
	bw   float64 // measured bandwidth, bytes per second
	want []byte
	src  *region
	dst  *region
	ld   sdk.DlistID
	rds  []sdk.DlistID
	// bl and br are a 4 KiB WRITE into the 4 KiB after the slots: the
	// barrier, which moves no byte a check compares.
	bl, br sdk.DlistID
}

// newFlight sets up a flight of n-byte WRITEs from a to b.
func (e *env) newFlight(a, b *agent, n uint64) *flight {
	e.t.Helper()
	f := &flight{e: e, a: a, b: b, n: n, want: pattern(n, n)}
	f.src, f.dst = a.region(n), b.region(n*flightWorkers+4096)
	f.src.write(0, f.want)
	f.peer = a.loadPeer(b)
	f.ld = a.dlist(0, f.src.desc(0, n))
	for w := range uint64(flightWorkers) {
		f.rds = append(f.rds, a.dlist(f.peer, f.dst.desc(w*n, n)))
	}
	f.bl, f.br = a.dlist(0, f.src.desc(0, 4096)), a.dlist(f.peer, f.dst.desc(flightWorkers*n, 4096))
	return f
}

// free releases what newFlight set up; its handles must be released.
func (f *flight) free() {
	f.e.t.Helper()
	f.a.releaseDlists(append([]sdk.DlistID{f.ld, f.bl, f.br}, f.rds...)...)
	f.a.unloadPeer(f.peer)
	f.a.deregister(f.src.ID)
	f.b.deregister(f.dst.ID)
}

// spec is the WRITE into worker w's slot.
func (f *flight) spec(w int) sdk.PostSpec {
	return sdk.PostSpec{Op: sdk.OpWrite, Local: f.ld, LocalIndices: []uint32{0}, Remote: f.rds[w], RemoteIndices: []uint32{0}}
}

// alone is how long one WRITE of the flight's size takes alone, Post to
// DONE, into memory already written once: the second of two WRITEs into
// slot 0. The first touch of fresh memory costs page faults (on a small
// machine it ran at a tenth of the speed) that the flight's transfers,
// which reuse their slots, mostly do not pay.
func (f *flight) alone(t T) time.Duration {
	a := f.a.as(t)
	var took time.Duration
	for range 2 {
		start := time.Now()
		h := a.post(f.spec(0))[0]
		if st := a.wait(h)[0]; st.State != sdk.StateDone {
			t.Fatalf("the WRITE of %d bytes that times a transfer alone ended %v (%v), want DONE", f.n, st.State, st.Reason)
		}
		took = time.Since(start)
		a.release(h)
	}
	return took
}

// probes are the offsets, within a slot, of the two 4 KiB windows that
// tell whether a WRITE is still far from done: its middle and its end.
func (f *flight) probes() [2]uint64 {
	return [2]uint64{(f.n / 2) &^ 4095, f.n - 4096}
}

// reset overwrites the probe and sample windows of worker w's slot with
// bytes that differ from the source's, before a WRITE into it.
func (f *flight) reset(t T, w int) {
	p := f.probes()
	for _, off := range append(p[:], f.sampleOffsets()...) {
		b := make([]byte, 4096)
		for i := range b {
			b[i] = ^f.want[off+uint64(i)]
		}
		if _, err := f.dst.File.WriteAt(b, int64(f.dst.Offset+uint64(w)*f.n+off)); err != nil {
			t.Fatalf("reset slot %d of region %d: %v", w, f.dst.ID, err)
		}
	}
}

// farFromDone reports whether neither probe window of worker w's slot has
// landed: at least half of the WRITE into it is still to come.
func (f *flight) farFromDone(t T, w int) bool {
	for _, off := range f.probes() {
		got := make([]byte, 4096)
		if _, err := f.dst.File.ReadAt(got, int64(f.dst.Offset+uint64(w)*f.n+off)); err != nil {
			t.Fatalf("read slot %d of region %d: %v", w, f.dst.ID, err)
		}
		if string(got) == string(f.want[off:off+4096]) {
			return false
		}
	}
	return true
}

// unfinished reports whether the last 4 KiB of worker w's slot have not
// landed: the WRITE into it is still running (or ended short of DONE).
func (f *flight) unfinished(t T, w int) bool {
	off := f.probes()[1]
	got := make([]byte, 4096)
	if _, err := f.dst.File.ReadAt(got, int64(f.dst.Offset+uint64(w)*f.n+off)); err != nil {
		t.Fatalf("read slot %d of region %d: %v", w, f.dst.ID, err)
	}
	return string(got) != string(f.want[off:off+4096])
}

// samples is how many 4 KiB windows, spread evenly, sample reads of a
// slot: a check that watches a slot for bytes still moving reads these
// rather than the whole slot.
const samples = 16

// sample returns the sampled windows of worker w's slot, last one at its
// end.
func (f *flight) sample(t T, w int) []byte {
	out := make([]byte, 0, (samples+1)*4096)
	for _, off := range f.sampleOffsets() {
		b := make([]byte, 4096)
		if _, err := f.dst.File.ReadAt(b, int64(f.dst.Offset+uint64(w)*f.n+off)); err != nil {
			t.Fatalf("read slot %d of region %d: %v", w, f.dst.ID, err)
		}
		out = append(out, b...)
	}
	return out
}

// sampleWant is what sample reads from a complete slot.
func (f *flight) sampleWant() []byte {
	out := make([]byte, 0, (samples+1)*4096)
	for _, off := range f.sampleOffsets() {
		out = append(out, f.want[off:off+4096]...)
	}
	return out
}

// landedWindows counts the windows of a sample (of sample) that hold
// what a complete slot holds.
func (f *flight) landedWindows(got []byte) int {
	want, n := f.sampleWant(), 0
	for i := 0; i < len(want); i += 4096 {
		if string(got[i:i+4096]) == string(want[i:i+4096]) {
			n++
		}
	}
	return n
}

func (f *flight) sampleOffsets() []uint64 {
	var offs []uint64
	for i := range uint64(samples) {
		offs = append(offs, (i*f.n/samples)&^4095)
	}
	return append(offs, f.n-4096)
}

// settle gives bytes that still move a chance to show: it runs three
// barrier WRITEs to completion one after the other (the transport made
// progress), then waits four times what one transfer of the flight takes
// at the measured bandwidth, and at least 50 ms. Only a transport that
// breaks a rule can be caught in it; a slow moment makes the check miss a
// break, never fail a good transport.
func (f *flight) settle(t T) {
	a := f.a.as(t)
	for range 3 {
		h := a.post(sdk.PostSpec{Op: sdk.OpWrite, Local: f.bl, LocalIndices: []uint32{0}, Remote: f.br, RemoteIndices: []uint32{0}})[0]
		a.wait(h)
		a.release(h)
	}
	time.Sleep(max(50*time.Millisecond, time.Duration(4*float64(f.n)/f.bw*float64(time.Second))))
}

// grow holds a transport to a rule that needs transfers still in flight.
// It measures the bandwidth from a to b, then calls try with flights of
// growing size, from what the transport moves in flightTarget, doubling
// up to flightCap, until the transfers try reports it observed in flight
// where it needed them add up to need. try frees nothing: grow frees
// each flight after it. When even the cap observed none, the check is
// skipped, saying so; when the cap observed fewer than need, grow logs
// how many and the check stands on them.
func (e *env) grow(a, b *agent, what string, need int, try func(f *flight) int) {
	e.t.Helper()
	limit := e.flightCap()
	probe := min(uint64(flightProbe), limit)
	bw := e.measure(a, b, probe)
	n := pow2(uint64(bw * flightTarget.Seconds()))
	n = min(max(n, flightMin), pow2(limit))
	if n > limit {
		n = limit
	}
	e.t.Logf("%s: %d bytes landed at %.2f GB/s: starting at %d bytes a transfer, up to %d", what, probe, bw/1e9, n, limit)
	total := 0
	for {
		f := e.newFlight(a, b, n)
		f.bw = bw
		got := try(f)
		if e.t.Failed() {
			return
		}
		f.free()
		total += got
		if total >= need {
			e.t.Logf("%s: %d transfers observed in flight, up to %d bytes each", what, total, n)
			return
		}
		if n >= limit {
			if total == 0 {
				e.t.Skipf("%s: even transfers of %d bytes (the cap: the suite's region size or Limits.MaxTransferBytes) were over before the suite could act on them at a measured %.2f GB/s",
					what, n, bw/1e9)
			}
			e.t.Logf("%s: only %d of the %d wanted transfers were in flight, up to the cap of %d bytes: a transport breaking the rule one time in ten passes with probability %.2g",
				what, total, need, n, missChance(total))
			return
		}
		e.t.Logf("%s: %d of %d wanted transfers observed in flight so far, the last of %d bytes: doubling", what, total, need, n)
		n = min(2*n, limit)
	}
}

// measure returns the bandwidth from a to b, bytes per second: one WRITE
// of n bytes timed from Post to DONE.
func (e *env) measure(a, b *agent, n uint64) float64 {
	e.t.Helper()
	f := e.newFlight(a, b, n)
	start := time.Now()
	h := a.post(f.spec(0))[0]
	if st := a.wait(h)[0]; st.State != sdk.StateDone {
		e.t.Fatalf("the WRITE of %d bytes that measures the bandwidth ended %v (%v), want DONE", n, st.State, st.Reason)
	}
	took := time.Since(start)
	a.release(h)
	f.free()
	return float64(n) / max(took.Seconds(), 1e-9)
}

// pow2 is the least power of two at or above n (1 for 0).
func pow2(n uint64) uint64 {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len64(n-1)
}

// missChance is the probability that a transport breaking a rule one time
// in ten passes k independent exercises of it: 0.9^k.
func missChance(k int) float64 {
	p := 1.0
	for range k {
		p *= 0.9
	}
	return p
}
