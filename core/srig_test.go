package core

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/sdk"
	"github.com/stretchr/testify/require"
)

// srigBlocks is the size of a srig's pool, and of every peer rank's
// (peerSpec).
const srigBlocks = 8

// srig is a Core over doubles (one per epoch) with one pool of srigBlocks
// blocks. Every command runs the Work it hands out to its end,
// synchronously.
type srig struct {
	t     testingT
	c     *Core
	d     *double // the attached epoch's
	ds    map[Epoch]*double
	dead  map[Epoch]bool
	pool  PoolID
	now   time.Time
	seen  map[RequestID]int
	stash Ready
	all   Ready
	// tamper, when set, edits a call's result before core sees it (a
	// transport that answers short, ...).
	tamper func(w Work, res *Result)
}

func newSrig(t testingT, cfg Config, mod func(d *double)) *srig {
	t.Helper()
	c, err := New(cfg)
	require.NoError(t, err)
	s := &srig{t: t, c: c, ds: map[Epoch]*double{}, dead: map[Epoch]bool{}, now: t0, seen: map[RequestID]int{}}
	s.attach(1, mod)
	s.pool, err = c.RegisterPool(PoolSpec{Path: "kv", BlockSize: 64, Blocks: srigBlocks})
	require.NoError(t, err)
	s.settle()
	ok, err := c.PoolReady(s.pool)
	require.NoError(t, err)
	require.True(t, ok)
	return s
}

// attach attaches a fresh double as epoch e.
func (s *srig) attach(e Epoch, mod func(d *double)) {
	s.t.Helper()
	d := newDouble()
	if mod != nil {
		mod(d)
	}
	require.NoError(s.t, s.c.Attach(e, d.desc, true))
	s.ds[e], s.d = d, d
	s.settle()
}

// drive runs rd's Work and what follows to the end and returns every report.
func (s *srig) drive(rd Ready) Ready {
	all := rd
	all.Work = nil
	// Each command or round hands out a bounded amount of Work: a host
	// that kept running Work for one command would spin without end.
	steps := 0
	for work := rd.Work; len(work) > 0; {
		steps++
		require.Less(s.t, steps, maxWorkSteps, "core keeps handing out Work: %v", work)
		for _, w := range work {
			d := s.ds[w.Epoch]
			if d == nil || s.dead[w.Epoch] {
				s.c.Done(w.ID, Result{}, sdk.Errorf(sdk.CodePluginShutdown, "epoch %d is dead", w.Epoch))
				continue
			}
			res, err := d.exec(w)
			if s.tamper != nil {
				s.tamper(w, &res)
			}
			s.c.Done(w.ID, res, err)
		}
		next := s.c.Ready()
		work = next.Work
		all = mergeReady(all, next)
	}
	return all
}

func (s *srig) settle() { s.stash = mergeReady(s.stash, s.drive(s.c.Ready())) }

// poll runs a round; it fails the test on a second report of any request.
func (s *srig) poll() Ready {
	s.t.Helper()
	rd := mergeReady(s.stash, s.drive(s.c.Poll(s.now)))
	s.stash = Ready{}
	for _, id := range slices.Concat(rd.FinishedSending, rd.FinishedReceiving, failedIDs(rd)) {
		s.seen[id]++
		require.LessOrEqual(s.t, s.seen[id], 1, "request %q reported twice", id)
	}
	s.all = mergeReady(s.all, rd)
	return rd
}

// reported runs a round that must report id (or find it reported
// before), and returns it.
func (s *srig) reported(id RequestID) Ready {
	s.t.Helper()
	rd := s.poll()
	require.Equal(s.t, 1, s.seen[id], "%q not reported; stats %+v", id, s.c.Stats())
	return rd
}

// done makes every running handle of the attached transport DONE.
func (s *srig) done() {
	for _, h := range s.d.live() {
		if !s.d.handles[h].Terminal() {
			s.d.set(h, sdk.StateDone, nil)
		}
	}
}

// kill fences epoch e: its process is dead.
func (s *srig) kill(e Epoch) {
	s.dead[e] = true
	s.c.Fenced(e)
}

// openSrig is newSrig whose Core is shut down at the test's end as a host
// going down does it (shutdown).
func openSrig(t *testing.T, cfg Config, mod func(d *double)) *srig {
	t.Helper()
	s := newSrig(t, cfg, mod)
	t.Cleanup(s.shutdown)
	return s
}

// shutdown closes the Core, polling while Close is refused: each transfer
// still running on a live transport ends DONE meanwhile, as every transfer
// does in the end (a stall of the fake ends at its time), and the clock
// reaches the next lease (a send or receive Close failed waits for its
// lease to be reported). Close must then succeed, and every live transport
// must hold nothing and be closed.
func (s *srig) shutdown() {
	s.t.Helper()
	for range maxWorkSteps {
		if err := s.closeCore(); err == nil {
			break
		}
		for e, d := range s.ds {
			if s.dead[e] {
				continue
			}
			for _, h := range d.live() {
				if !d.handles[h].Terminal() {
					d.set(h, sdk.StateDone, nil)
				}
			}
		}
		if at := s.c.next().At; at.After(s.now) {
			s.now = at
		}
		s.poll()
	}
	require.NoError(s.t, s.closeCore(), "Close still refused")
	s.poll()
	for e, d := range s.ds {
		if s.dead[e] {
			continue // a dead process holds nothing
		}
		require.True(s.t, d.held().Zero(), "epoch %d still holds %+v", e, d.held())
		require.True(s.t, d.closed, "epoch %d was not closed", e)
	}
}

// connectPeer connects ps and returns the handshake's error: the
// handshake_failed Alert's.
func (s *srig) connectPeer(ps PeerSpec) error {
	s.t.Helper()
	if err := s.c.ConnectPeer(ps); err != nil {
		return err
	}
	before := len(s.stash.Alerts)
	s.settle()
	for _, a := range s.stash.Alerts[before:] {
		if a.Kind == "handshake_failed" && a.Peer == ps.Name {
			return a.Err
		}
	}
	return nil
}

// peer is a PeerSpec of n ranks of 8 blocks each (notifyOnly ranks none).
func peerSpec(name string, n int, notifyOnly ...int) PeerSpec {
	ps := PeerSpec{Name: name}
	for i := range n {
		rs := RankSpec{Agent: fmt.Sprintf("%s%d", name, i), Metadata: []byte("md"), Region: 1, BlockSize: 64, Blocks: srigBlocks}
		if slices.Contains(notifyOnly, i) {
			rs.Blocks = 0
		}
		ps.Ranks = append(ps.Ranks, rs)
	}
	return ps
}

func (s *srig) connect(ps PeerSpec) {
	s.t.Helper()
	require.NoError(s.t, s.c.ConnectPeer(ps))
	s.settle()
}

// readSpec reads one block per part (rank k's block k into a fresh block).
func (s *srig) readSpec(id RequestID, peer string, parts int) (ReadSpec, []BlockRef) {
	s.t.Helper()
	spec := ReadSpec{Request: id, Token: tok(id), Peer: peer}
	var blocks []BlockRef
	for k := range parts {
		b, err := s.c.Alloc(s.pool, 1)
		require.NoError(s.t, err)
		spec.Parts = append(spec.Parts, Part{Pool: s.pool, Local: b, Rank: k, Remote: []uint32{uint32(k)}})
		blocks = append(blocks, BlockRef{s.pool, b[0]})
	}
	return spec, blocks
}

// read issues readSpec's read and runs its Work.
func (s *srig) read(id RequestID, peer string, parts int) []BlockRef {
	s.t.Helper()
	spec, blocks := s.readSpec(id, peer, parts)
	require.NoError(s.t, s.do(s.c.Read(s.now, spec)))
	return blocks
}

// do runs the Work of the command that returned err, and returns err:
// s.do(s.c.Write(s.now, spec)).
func (s *srig) do(err error) error {
	s.settle()
	return err
}

func (s *srig) owners(blocks []BlockRef) []Owner {
	out := make([]Owner, len(blocks))
	for i, b := range blocks {
		out[i] = s.c.Owner(b)
	}
	return out
}

// handles are the double's live handles, in order.
func (d *double) live() []sdk.HandleID {
	var out []sdk.HandleID
	for h := range d.handles {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

// count counts the calls of kind so far.
func (d *double) count(kind WorkKind) int {
	n := 0
	for _, c := range d.calls {
		if strings.HasPrefix(c[strings.Index(c, " ")+1:], kind.String()+" ") {
			n++
		}
	}
	return n
}
