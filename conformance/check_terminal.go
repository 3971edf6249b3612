package conformance

import (
	"fmt"
	"sync"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// terminalRecheck is how long after the last handle turned terminal the
// suite polls every handle again: a terminal state must never change, so
// time passing is the stimulus, never something the suite waits for.
const terminalRecheck = 250 * time.Millisecond

// termSlot is the bytes each worker of the terminal checks moves: over
// one 64 KiB chunk of the fake, so that a transfer takes more than one step.
const termSlot = 64<<10 + 5

// terminalRun is one handle of the terminal checks: its id and the first
// terminal status Poll reported.
type terminalRun struct {
	h  sdk.HandleID
	st sdk.HandleStatus
}

// postToTerminal runs Config.Repeat WRITEs, parallelWorkers at once, each
// into a slot of its own, and returns each handle with the first terminal
// status seen, unreleased. When not nil, after calls it on each worker's
// handle once terminal (before the next of that worker).
func postToTerminal(e *env, a, b *agent, after func(t T, a *agent, r terminalRun)) []terminalRun {
	e.t.Helper()
	l := e.linkBetween(a, b, parallelWorkers*termSlot)
	lds, rds := make([]sdk.DlistID, parallelWorkers), make([]sdk.DlistID, parallelWorkers)
	for w := range uint64(parallelWorkers) {
		lds[w], rds[w] = a.dlist(0, l.src.desc(w*termSlot, termSlot)), a.dlist(l.peer, l.dst.desc(w*termSlot, termSlot))
	}
	var mu sync.Mutex
	var runs []terminalRun
	e.parallel(e.cfg.Repeat, func(t T, w, i int) {
		a := a.as(t)
		want := pattern(uint64(i)<<8|0x5a, termSlot)
		l.src.as(a).write(uint64(w)*termSlot, want)
		h := a.post(sdk.PostSpec{Op: sdk.OpWrite, Local: lds[w], LocalIndices: []uint32{0}, Remote: rds[w], RemoteIndices: []uint32{0}})[0]
		st := a.wait(h)[0]
		if st.State == sdk.StateDone {
			expectBytes(l.dst.as(a.as(t)), uint64(w)*termSlot, want, fmt.Sprintf("handle %d, as soon as DONE was reported", h))
		}
		r := terminalRun{h: h, st: st}
		if again := a.recheck(h)[0]; !sameTerminal(again, st) {
			t.Fatalf("handle %d was reported %v (%v), then %v (%v, item error %v) by the very next Poll: a terminal state never changes", h, st.State, st.Reason, again.State, again.Reason, again.Err)
		}
		if after != nil {
			after(t, a, r)
		}
		mu.Lock()
		runs = append(runs, r)
		mu.Unlock()
	})
	return runs
}

// sameTerminal reports whether a later status repeats a terminal one:
// same state, no item error, and a reason of the same code.
func sameTerminal(later, first sdk.HandleStatus) bool {
	return later.Err == nil && later.State == first.State && sdk.CodeOf(later.Reason) == sdk.CodeOf(first.Reason)
}

// recheckTerminal polls every run again once terminalRecheck has passed
// since the last turned terminal and a barrier transfer completed, and
// fails the check for each whose state changed; then releases them.
func recheckTerminal(e *env, a *agent, runs []terminalRun, what string) {
	e.t.Helper()
	time.Sleep(terminalRecheck)
	ids := make([]sdk.HandleID, len(runs))
	for i, r := range runs {
		ids[i] = r.h
	}
	changed := 0
	for i, st := range a.recheck(ids...) {
		if !sameTerminal(st, runs[i].st) {
			changed++
			if changed <= 3 {
				e.t.Errorf("handle %d was reported %v (%v)%s, and %v later Poll says %v (%v, item error %v): a terminal state never changes",
					runs[i].h, runs[i].st.State, runs[i].st.Reason, what, terminalRecheck, st.State, st.Reason, st.Err)
			}
		}
	}
	if changed > 0 {
		e.t.Errorf("%d of %d terminal handles changed state %v later (a transport that does so one time in ten passes this check with probability %.2g)",
			changed, len(runs), terminalRecheck, missChance(len(runs)))
	}
	a.release(ids...)
}

// checkTerminalStays: a terminal state never changes.
var checkTerminalStays = check{
	name: "contract/terminal-stays",
	doc: "a handle's terminal state never changes: --repeat (default 100) WRITEs, 8 at a time, each polled until terminal (DONE with its bytes in place), " +
		"then again at once and again 250 ms after the last turned terminal, asked of the transport itself (out of process: over gRPC, past the rings' record), report the same state and reason code; " +
		"a transport whose terminal state changes one time in ten passes with probability 0.9^repeat (2.7e-5)",
	needs: movesData,
	run: func(e *env) {
		a, b := e.pair()
		runs := postToTerminal(e, a, b, nil)
		if e.t.Failed() {
			return
		}
		recheckTerminal(e, a, runs, "")
	},
}

// checkCancelTerminal: Cancel of a terminal handle is OK and changes
// nothing.
var checkCancelTerminal = check{
	name: "cancel/terminal-unchanged",
	doc: "Cancel of a terminal handle is OK and changes nothing: on --repeat (default 100) handles, 8 at a time, the state and reason Poll reports after it, at once and 250 ms later, of the transport itself (past the rings' record), " +
		"are those before it, and Resources do not change; Cancel of a released or never-issued handle is NOT_FOUND. " +
		"A transport breaking this one time in ten passes with probability 0.9^repeat (2.7e-5)",
	needs: movesData,
	run: func(e *env) {
		a, b := e.pair()
		runs := postToTerminal(e, a, b, func(t T, a *agent, r terminalRun) {
			ctx, cancel := e.callCtx()
			errs, err := a.tr.Cancel(ctx, []sdk.HandleID{r.h})
			cancel()
			if err = firstItemErr(errs, err); err != nil {
				t.Fatalf("Cancel(handle %d, terminal: %v): %v, want OK (Cancel of a terminal handle is OK and changes nothing)", r.h, r.st.State, err)
			}
			if st := a.recheck(r.h)[0]; !sameTerminal(st, r.st) {
				t.Fatalf("handle %d was %v (%v); right after Cancel, Poll says %v (%v, item error %v): Cancel of a terminal handle changes nothing",
					r.h, r.st.State, r.st.Reason, st.State, st.Reason, st.Err)
			}
		})
		if e.t.Failed() {
			return
		}
		before := a.resources()
		ids := make([]sdk.HandleID, len(runs))
		for i, r := range runs {
			ids[i] = r.h
		}
		ctx, cancel := e.callCtx()
		errs, err := a.tr.Cancel(ctx, ids[:min(len(ids), e.maxBatch())])
		cancel()
		if err = firstItemErr(errs, err); err != nil {
			e.t.Errorf("Cancel of %d terminal handles at once: %v, want OK", min(len(ids), e.maxBatch()), err)
		}
		if after := a.resources(); after != before {
			e.t.Errorf("Cancel of terminal handles changed Resources: %+v, then %+v", before, after)
		}
		recheckTerminal(e, a, runs, " before Cancel")
		for _, tc := range []struct {
			what string
			id   sdk.HandleID
		}{{"released", ids[0]}, {"never issued", unknownHandle}} {
			ctx, cancel := e.callCtx()
			errs, err := a.tr.Cancel(ctx, []sdk.HandleID{tc.id})
			cancel()
			if c := codeOf(errs, err); c != sdk.CodeNotFound {
				e.t.Errorf("Cancel(%s handle %d): code %v (%v), want NOT_FOUND", tc.what, tc.id, c, firstErr(errs, err))
			}
		}
	},
}

// checkDoneMeansLanded: every byte is in place the instant DONE is seen.
var checkDoneMeansLanded = check{
	name: "data/done-means-landed",
	doc: "DONE means landed: --repeat (default 100) READs and as many WRITEs, 8 at a time, of 9 sizes from 1 byte to over 1 MiB (several chunks) in turn (each size 22 times), at odd offsets, " +
		"have every byte in place (the last ones read first) the instant Poll first reports DONE; " +
		"a transport reporting DONE early one time in ten passes with probability 0.9^(2 x repeat)",
	needs: movesData,
	run: func(e *env) {
		a, b := e.pair()
		sizes := []uint64{1, 3, 4095, 4096, 4097, 65535, 65536 + 7, 3<<16 + 11, 1<<20 + 13}
		const slot = 2 << 20
		ra, rb := a.region(parallelWorkers*slot), b.region(parallelWorkers*slot)
		peer := a.loadPeer(b)
		e.parallel(2*e.cfg.Repeat, func(t T, w, i int) {
			a := a.as(t)
			size, op := sizes[i%len(sizes)], []sdk.Op{sdk.OpWrite, sdk.OpRead}[i%2]
			base := uint64(w) * slot
			from, to := base+uint64(i%7), base+uint64(i%13)+guard
			src, dst, local, remote := ra.as(a), rb.as(a), ra.desc(from, size), rb.desc(to, size)
			if op == sdk.OpRead {
				src, dst, local, remote = rb.as(a), ra.as(a), ra.desc(to, size), rb.desc(from, size)
			}
			want := pattern(uint64(i)<<4|uint64(op), size)
			src.write(from, want)
			ld, rd := a.dlist(0, local), a.dlist(peer, remote)
			h := a.post(sdk.PostSpec{Op: op, Local: ld, LocalIndices: []uint32{0}, Remote: rd, RemoteIndices: []uint32{0}})[0]
			if st := a.wait(h)[0]; st.State != sdk.StateDone {
				t.Fatalf("%v of %d bytes: handle %d ended %v (%v), want DONE", op, size, h, st.State, st.Reason)
			}
			if !expectBytes(dst, to, want, fmt.Sprintf("%v of %d bytes (handle %d), the instant DONE was first reported", op, size, h)) {
				t.Fatalf("DONE was reported before every byte landed: DONE means every byte is in place at the destination")
			}
			a.release(h)
			a.releaseDlists(ld, rd)
		})
	},
}
