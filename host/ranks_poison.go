package host

import (
	"context"
	"fmt"
	"sort"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/host/group"
)

// A pool this rank knows poisoned stays poisoned on it until restart
// (rule 11: poison is sticky), whether this rank poisoned it or the group
// did, and even once an operator cleared the record: the running engine
// may still hold blocks of it. The group publishes it to every rank; a
// publish that fails is retried by the sync goroutine.

// poison marks pool poisoned on this rank at once and publishes it to the
// group from the sync goroutine (owner).
func (r *rankSync) poison(pool, reason string) {
	r.mu.Lock()
	if _, ok := r.poisoned[pool]; !ok {
		r.poisoned[pool] = reason
		r.toPoison[pool] = reason
	}
	r.mu.Unlock()
	r.wake()
}

// publishPoison sticks what the group poisoned, then publishes the pools
// this rank poisoned since its last step, keeping those that failed for
// the next (sync goroutine).
func (r *rankSync) publishPoison(ctx context.Context, poison map[string]string) {
	for _, rec := range r.g.Poisoned() {
		r.stick(rec)
	}
	for pool, why := range poison {
		if err := r.g.Poison(ctx, pool, why); err != nil {
			r.log.Error("publishing poison failed; retrying", "failure_type", "group_poison_failed", "pool", pool, "error", err.Error())
			r.mu.Lock()
			r.toPoison[pool] = why
			r.mu.Unlock()
		}
	}
}

// admit refuses a new request on a poisoned pool, or while this rank is no
// longer a member of its group.
func (r *rankSync) admit(id core.RequestID, pools []string) error {
	if len(id) > group.MaxRequestIDLen {
		return fmt.Errorf("request id of %d bytes: a rank of a group takes at most %d", len(id), group.MaxRequestIDLen)
	}
	r.mu.Lock()
	lost := r.lost
	r.mu.Unlock()
	if lost != nil {
		return fmt.Errorf("request %q: %w: %w", id, ErrClosed, lost)
	}
	for _, p := range pools {
		if why, ok := r.isPoisoned(p); ok {
			return fmt.Errorf("request %q: pool %q: %w on every rank of the group (%s); its blocks are never handed out again until an operator clears the poison and the engines restart", id, p, ErrPoisoned, why)
		}
	}
	return nil
}

func (r *rankSync) isPoisoned(pool string) (string, bool) {
	r.mu.Lock()
	why, ok := r.poisoned[pool]
	r.mu.Unlock()
	if ok {
		return why, true
	}
	if rec, ok := r.g.IsPoisoned(pool); ok {
		return r.stick(rec), true
	}
	return "", false
}

// stick records a pool the group poisoned as poisoned on this rank until
// restart, and returns the reason kept.
func (r *rankSync) stick(rec group.PoisonRecord) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	why, ok := r.poisoned[rec.Pool]
	if !ok {
		why = fmt.Sprintf("rank %d: %s", rec.Rank, rec.Reason)
		r.poisoned[rec.Pool] = why
	}
	return why
}

// Poisoned lists the pools poisoned on this rank: its own and every rank's.
func (r *rankSync) Poisoned() []string {
	for _, rec := range r.g.Poisoned() {
		r.stick(rec)
	}
	set := map[string]bool{}
	r.mu.Lock()
	for p := range r.poisoned {
		set[p] = true
	}
	r.mu.Unlock()
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}
