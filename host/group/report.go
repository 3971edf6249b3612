package group

import "context"

// Stats counts the etcd transactions Report and Resolve made.
type Stats struct {
	WriteTxns uint64
	ReadTxns  uint64
	// InFlight is the number of request ids this rank still tracks.
	InFlight int
	// Unwritten is the number of writes (states, deletions) waiting for
	// the next Report.
	Unwritten int
}

// Stats returns the counters since Open.
func (g *Group) Stats() Stats {
	g.callMu.Lock()
	defer g.callMu.Unlock()
	g.mu.Lock()
	st := g.l.Stats()
	g.mu.Unlock()
	return Stats{WriteTxns: g.writes.Load(), ReadTxns: g.reads.Load(), InFlight: st.InFlight, Unwritten: st.Unwritten}
}

// Report records this rank's local terminal states and publishes them in
// one states record (more past ledger.MaxRecordStates), with the deletion
// of this member's records whose requests every rank's state is in, and
// of the records the group no longer needs, in one etcd transaction (more
// only past etcd's operations per transaction). Call it once per round,
// with the round's new terminal states (possibly none).
//
// Input is checked whole first: an empty, oversized or invalid id, an
// unknown state, or a request already reported with another state is an
// error and changes nothing. Reporting the same state again is a no-op. A
// state once accepted is never lost: if etcd fails, Report returns the
// error (matching ErrCoordinator) and publishes it at the next call.
// A reason longer than MaxReasonLen is cut.
func (g *Group) Report(ctx context.Context, terminals []Terminal) error {
	if err := g.checkJoined(); err != nil {
		return err
	}
	g.callMu.Lock()
	defer g.callMu.Unlock()
	g.mu.Lock()
	err := g.l.Report(terminals)
	g.mu.Unlock()
	if err != nil || g.cfg.Solo() {
		return err
	}
	return g.flush(ctx)
}

// flush runs the ledger's next write, transaction by transaction. Called
// with callMu held.
func (g *Group) flush(ctx context.Context) error {
	g.mu.Lock()
	f := g.l.Flush(g.cfg.Coordinator.MaxTxnOps)
	g.mu.Unlock()
	for {
		g.mu.Lock()
		t, ok := f.Next()
		g.mu.Unlock()
		if !ok {
			return f.Err()
		}
		res, err := g.run(ctx, t)
		if err != nil {
			return g.wrap(t.What, err)
		}
		g.mu.Lock()
		rev0 := g.l.Rev()
		changed, err := f.Done(res)
		g.signal(changed, rev0)
		g.mu.Unlock()
		if err != nil {
			return err
		}
	}
}
