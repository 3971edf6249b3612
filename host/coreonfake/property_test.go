package coreonfake

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/sdk"
)

// TestOwnershipProperties drives random requests (reads, writes, sends and
// push receives, whose producers are the remote agents writing into our
// pool and notifying on DONE), peer removals and reconnections, consumer
// notifications, rounds and injected faults through the in-process fake and
// checks after every step that:
//   - no block held by the engine, or reassigned to another request, is
//     reachable by a live handle, nor by a producer's write still running
//     (rules 1, 6 and 7);
//   - no handle was released before the transport reported it terminal
//     (rule 1);
//   - each request has at most one terminal report (rule 16);
//
// and at the end, once drained, that every request had exactly one report
// and every native resource count is back to zero (rule 16). It sees core
// as a host does, through its exported API (Owner, Stats, the Ready
// reports) and the spied transport (the handles core posted and has not
// released, and the blocks each reaches); core's FuzzCoreOps checks the same
// invariants over the scripted double, against core's own bookkeeping.
func TestOwnershipProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		dir, err := os.MkdirTemp("", "core-prop-*")
		require.NoError(rt, err)
		defer os.RemoveAll(dir)
		ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
		defer cancel()

		faults := []string{}
		for _, f := range []string{"fail,prob=0.15", "disconnect,prob=0.05", "release-fail,prob=0.2,count=2", "poll-fail,prob=0.2,count=2", "stall,prob=0.2,for=5ms"} {
			if rapid.Bool().Draw(rt, "fault "+f) {
				faults = append(faults, f)
			}
		}
		seed := rapid.Uint64Range(1, 1<<20).Draw(rt, "seed")
		noEvents := rapid.Bool().Draw(rt, "poll instead of events")
		var remote map[int]string
		if rapid.Bool().Draw(rt, "producer faults") {
			f := "stall,prob=0.3,for=20ms;fail,prob=0.15;notif-drop,prob=0.1"
			remote = map[int]string{0: f, 1: f}
		}
		r := openRig(rt, ctx, dir, rigOpts{
			// Initiated-only fences: a failed push receive quarantines its
			// blocks rather than asking for a fence this test cannot give.
			fence:    "initiated",
			remote:   remote,
			local:    strings.Join(faults, ";"),
			params:   map[string]string{"seed": fmt.Sprint(seed)},
			cfg:      core.Config{Batch: rapid.IntRange(0, 3).Draw(rt, "batch")},
			noEvents: noEvents, // the fallback: poll every live handle
			setup: func(s *spy) {
				s.cancelNone = rapid.Bool().Draw(rt, "cancel none")
			},
		})
		m := &model{r: r, issued: map[core.RequestID]bool{}, inc: map[core.RequestID]*incarnation{}, pdl: map[int][2]sdk.DlistID{}, touched: map[core.RequestID]bool{},
			gen: map[core.RequestID]int{}, held: map[core.BlockRef]reqKey{}, handles: map[sdk.HandleID]reqKey{}}
		done := false
		defer func() {
			if !done {
				// rapid ended the case early (a failure, or a data overrun it
				// discards): release everything without asserting, so no
				// agent outlives the case, then let rapid carry on.
				v := recover()
				m.abandon()
				if v != nil {
					panic(v)
				}
			}
		}()
		r.connect("p")
		m.connected = true
		steps := rapid.IntRange(1, 40).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			switch op := rapid.IntRange(0, 11).Draw(rt, "op"); op {
			case 11:
				m.reuse(rt)
			case 10:
				m.receive(rt, m.id("v"))
			case 0, 1:
				m.read(rt, rapid.IntRange(1, 2).Draw(rt, "parts"), rapid.Bool().Draw(rt, "notify"))
			case 2:
				m.write(rt, rapid.IntRange(1, 2).Draw(rt, "parts"))
			case 3:
				m.expectSend(rt, m.id("s"))
			case 4:
				m.notify(rt)
			case 5:
				if m.connected {
					require.NoError(rt, r.removePeer("p"))
				} else {
					r.connect("p")
				}
				m.connected = !m.connected
			default:
				r.now = r.now.Add(time.Duration(rapid.IntRange(0, 2000).Draw(rt, "ms")) * time.Millisecond)
				m.round()
			}
			m.check()
		}
		m.drain()
		done = true
	})
}
