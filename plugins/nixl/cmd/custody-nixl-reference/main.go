//go:build nixl

// Command custody-nixl-reference drives NIXL directly, without custody: two
// agents in two processes (this one and a copy of itself it starts as the
// target), one NIXL request per transfer (makeXferReq, postXferReq,
// getXferStatus until done, releaseXferReq), the way an engine uses NIXL.
// custody bench runs it beside custody over NIXL, in the same run, with the
// same sizes, depths and polling, and prints their ratio.
//
//	custody-nixl-reference bw -size N -op write|read -depth D -min-time T [-param k=v ...]
//	    prints: reference size=N op=write depth=D mibps=X
//	custody-nixl-reference lat -size N -min-time T [-param k=v ...]
//	    prints: reference size=N op=write p50_ns=X p99_ns=Y n=K
//
// The parameters are the transport's (backend, tls, backend parameters).
package main

import (
	"bufio"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/custody-dev/custody/plugins/nixl"
)

// regionBytes is each agent's buffer, as custody bench's.
const regionBytes = 64 << 20

// benchPause is the first pause between two status rounds, as custody
// bench's (pollPause in internal/bench/pair.go).
const benchPause = 50 * time.Microsecond

type paramList map[string]string

func (p paramList) String() string { return fmt.Sprint(map[string]string(p)) }

func (p paramList) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("parameter %q: want k=v", s)
	}
	p[k] = v
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "custody-nixl-reference:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) < 2 {
		return errors.New("usage: custody-nixl-reference bw|lat|target [flags]")
	}
	mode := os.Args[1]
	fs := flag.NewFlagSet(mode, flag.ContinueOnError)
	params := paramList{}
	size := fs.Int("size", 4<<10, "bytes per transfer")
	op := fs.String("op", "write", "write or read")
	depth := fs.Int("depth", 1, "transfers in flight (bw), in two groups")
	minTime := fs.Duration("min-time", time.Second, "least time measured")
	pause := fs.Duration("pause", -1, "bw: pause between two status rounds of a group: 0 spins, a negative one pauses as custody bench does (50 µs growing to 1/32 of the group's last time)")
	fs.Var(params, "param", "transport parameter k=v (repeatable)")
	if err := fs.Parse(os.Args[2:]); err != nil {
		return err
	}
	if mode == "target" {
		return target(params)
	}
	if *size <= 0 || *size > regionBytes || *depth < 1 || *depth**size > regionBytes {
		return fmt.Errorf("-size %d and -depth %d must fit %d bytes", *size, *depth, regionBytes)
	}
	if *op != "write" && *op != "read" {
		return fmt.Errorf("-op %q: want write or read", *op)
	}
	in, err := connect(params)
	if err != nil {
		return err
	}
	defer in.stop()
	switch mode {
	case "bw":
		mibps, err := in.bandwidth(*op == "write", *size, *depth, *minTime, *pause)
		if err != nil {
			return err
		}
		fmt.Printf("reference size=%d op=%s depth=%d mibps=%.1f\n", *size, *op, *depth, mibps)
	case "lat":
		p50, p99, n, err := in.latency(*op == "write", *size, *minTime)
		if err != nil {
			return err
		}
		fmt.Printf("reference size=%d op=%s p50_ns=%d p99_ns=%d n=%d\n", *size, *op, p50.Nanoseconds(), p99.Nanoseconds(), n)
	default:
		return fmt.Errorf("mode %q: want bw, lat or target", mode)
	}
	return nil
}

// buffer is a region file in /dev/shm mapped shared, as custody's pools.
type buffer struct {
	path string
	b    []byte
}

func newBuffer() (*buffer, error) {
	dir := "/dev/shm"
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		dir = os.TempDir()
	}
	f, err := os.CreateTemp(dir, "custody-nixl-ref-")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := f.Truncate(regionBytes); err != nil {
		os.Remove(f.Name())
		return nil, err
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, regionBytes, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		os.Remove(f.Name())
		return nil, err
	}
	return &buffer{path: f.Name(), b: b}, nil
}

func (b *buffer) free() {
	_ = syscall.Munmap(b.b)
	_ = os.Remove(b.path)
}

func (b *buffer) addr() uint64 { return uint64(uintptr(unsafe.Pointer(&b.b[0]))) }

// target is the passive agent: it registers its buffer, prints its
// metadata and buffer address, and lives until its stdin closes.
func target(params paramList) error {
	ag, err := nixl.OpenDirect("nixl-ref-target", params)
	if err != nil {
		return err
	}
	defer ag.Close()
	buf, err := newBuffer()
	if err != nil {
		return err
	}
	defer buf.free()
	if err := ag.Register(buf.b); err != nil {
		return err
	}
	defer ag.Deregister(buf.b)
	md, err := ag.Metadata()
	if err != nil {
		return err
	}
	fmt.Printf("%s %d\n", hex.EncodeToString(md), buf.addr())
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the initiator ends
	return nil
}

// initiator is the active agent and its target process.
type initiator struct {
	ag     *nixl.Direct
	buf    *buffer
	peer   string
	remote uint64
	cmd    *exec.Cmd
	stdin  interface{ Close() error }
}

func connect(params paramList) (*initiator, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"target"}
	for k, v := range params {
		args = append(args, "-param", k+"="+v)
	}
	cmd := exec.Command(self, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	in := &initiator{cmd: cmd, stdin: stdin}
	line, err := bufio.NewReader(out).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 2 {
		in.stop()
		return nil, fmt.Errorf("target printed %q (%v)", line, err)
	}
	md, err := hex.DecodeString(f[0])
	if err != nil {
		in.stop()
		return nil, fmt.Errorf("target metadata: %w", err)
	}
	if in.remote, err = strconv.ParseUint(f[1], 10, 64); err != nil {
		in.stop()
		return nil, fmt.Errorf("target address: %w", err)
	}
	if in.ag, err = nixl.OpenDirect("nixl-ref-initiator", params); err != nil {
		in.stop()
		return nil, err
	}
	if in.buf, err = newBuffer(); err != nil {
		in.stop()
		return nil, err
	}
	if err := in.ag.Register(in.buf.b); err != nil {
		in.stop()
		return nil, err
	}
	if in.peer, err = in.ag.Load(md); err != nil {
		in.stop()
		return nil, err
	}
	return in, nil
}

func (in *initiator) stop() {
	if in.ag != nil {
		if in.peer != "" {
			_ = in.ag.Invalidate(in.peer)
		}
		if in.buf != nil {
			_ = in.ag.Deregister(in.buf.b)
		}
		in.ag.Close()
	}
	if in.buf != nil {
		in.buf.free()
	}
	_ = in.stdin.Close()
	_ = in.cmd.Wait()
}

// dlists prepares n descriptors of size bytes on both sides.
func (in *initiator) dlists(size, n int) (*nixl.DirectDlist, *nixl.DirectDlist, error) {
	la, ra, lens := make([]uint64, n), make([]uint64, n), make([]uint64, n)
	for i := range n {
		la[i] = in.buf.addr() + uint64(i*size)
		ra[i] = in.remote + uint64(i*size)
		lens[i] = uint64(size)
	}
	l, err := in.ag.Prep("", la, lens)
	if err != nil {
		return nil, nil, err
	}
	r, err := in.ag.Prep(in.peer, ra, lens)
	if err != nil {
		_ = in.ag.ReleaseDlist(l)
		return nil, nil, err
	}
	return l, r, nil
}

// bandwidth keeps depth transfers of one descriptor each in flight in two
// groups, as custody bench does: while one group runs, the other is polled
// until all are done, released and posted again; at least minTime after a
// warm-up round. It returns MiB/s. Between two status rounds it pauses as
// pause says; custody bench passes none, so both sides are polled by the
// same loop.
func (in *initiator) bandwidth(write bool, size, depth int, minTime, pause time.Duration) (float64, error) {
	l, r, err := in.dlists(size, depth)
	if err != nil {
		return 0, err
	}
	defer in.ag.ReleaseDlist(r)
	defer in.ag.ReleaseDlist(l)
	half := max(1, depth/2)
	groups := [][2]int{{0, half}, {half, depth}}
	if half == depth {
		groups = groups[:1]
	}
	post := func(g [2]int) ([]*nixl.DirectReq, error) {
		reqs := make([]*nixl.DirectReq, 0, g[1]-g[0])
		for i := g[0]; i < g[1]; i++ {
			q, err := in.ag.Post(write, l, []int32{int32(i)}, r, []int32{int32(i)})
			if err != nil {
				return nil, err
			}
			reqs = append(reqs, q)
		}
		return reqs, nil
	}
	done := make([]bool, depth)
	var last time.Duration
	wait := func(reqs []*nixl.DirectReq) error {
		posted := time.Now()
		pending := slices.Clone(reqs)
		p := pause
		if p < 0 {
			p = benchPause
		}
		for len(pending) > 0 {
			if err := in.ag.Status(pending, done); err != nil {
				return err
			}
			next := pending[:0]
			for i, q := range pending {
				if !done[i] {
					next = append(next, q)
				}
			}
			pending = next
			if len(pending) > 0 && p > 0 {
				time.Sleep(p)
				if pause < 0 {
					p = min(2*p, max(benchPause, last/32))
				}
			}
		}
		last = time.Since(posted)
		for _, q := range reqs {
			if err := in.ag.Release(q); err != nil {
				return err
			}
		}
		return nil
	}
	round := func(rounds int, minTime time.Duration) (int, time.Duration, error) {
		inflight := make([][]*nixl.DirectReq, len(groups))
		for g := range groups {
			var err error
			if inflight[g], err = post(groups[g]); err != nil {
				return 0, 0, err
			}
		}
		start := time.Now()
		n := 0
		for g := 0; ; g = (g + 1) % len(groups) {
			if err := wait(inflight[g]); err != nil {
				return 0, 0, err
			}
			n += groups[g][1] - groups[g][0]
			if n >= rounds*depth && time.Since(start) >= minTime {
				for k := 1; k < len(groups); k++ {
					o := (g + k) % len(groups)
					if err := wait(inflight[o]); err != nil {
						return 0, 0, err
					}
					n += groups[o][1] - groups[o][0]
				}
				return n, time.Since(start), nil
			}
			var err error
			if inflight[g], err = post(groups[g]); err != nil {
				return 0, 0, err
			}
		}
	}
	if _, _, err := round(1, 0); err != nil {
		return 0, err
	}
	n, el, err := round(4, minTime)
	if err != nil {
		return 0, err
	}
	return float64(n*size) / el.Seconds() / (1 << 20), nil
}

// latency posts one transfer at a time and spins on getXferStatus until
// it is done, at least minTime; it returns the p50 and p99 of the
// post-to-done times (the release is not timed).
func (in *initiator) latency(write bool, size int, minTime time.Duration) (p50, p99 time.Duration, n int, err error) {
	l, r, err := in.dlists(size, 1)
	if err != nil {
		return 0, 0, 0, err
	}
	defer in.ag.ReleaseDlist(r)
	defer in.ag.ReleaseDlist(l)
	idx := []int32{0}
	done := []bool{false}
	var times []time.Duration
	var start time.Time
	// 100 warm-up transfers, then at least 100 timed ones and minTime.
	for warm := 100; warm > 0 || len(times) < 100 || time.Since(start) < minTime; warm-- {
		if warm == 0 {
			start = time.Now()
		}
		t0 := time.Now()
		q, err := in.ag.Post(write, l, idx, r, idx)
		if err != nil {
			return 0, 0, 0, err
		}
		reqs := []*nixl.DirectReq{q}
		for done[0] = false; !done[0]; {
			if err := in.ag.Status(reqs, done); err != nil {
				return 0, 0, 0, err
			}
		}
		d := time.Since(t0)
		if err := in.ag.Release(q); err != nil {
			return 0, 0, 0, err
		}
		if warm <= 0 {
			times = append(times, d)
		}
	}
	slices.Sort(times)
	return times[len(times)/2], times[len(times)*99/100], len(times), nil
}
