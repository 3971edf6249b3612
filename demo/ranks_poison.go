package demo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/custody-dev/custody/client"
	"github.com/custody-dev/custody/internal/cluster"
)

// runPoison makes rank 0 of the poison engine quarantine a block: a push
// receive from the prefill engine, whose ranks never write it. Its lease
// ends, and with a fence that reaches only the transfers it initiated
// nothing proves the producer stopped: at the hold cap the blocks are
// quarantined, and the pool is poisoned on both ranks. Then a new request
// on the pool, on each rank, must be refused with FailedPrecondition.
func runPoison(ctx context.Context, s *RanksSummary, psn []*cluster.Host) error {
	for _, h := range psn {
		if err := h.Client.ConnectPeer(ctx, "prefill", client.RemoteRank{Address: "engine:pre", Pool: "kv"}); err != nil {
			return fmt.Errorf("%s: connect prefill by name: %w", h.Name, err)
		}
	}
	h := psn[0]
	b, err := h.Client.Alloc(ctx, h.Pool, 2)
	if err != nil {
		return fmt.Errorf("%s: alloc: %w", h.Name, err)
	}
	const id = "poison-0"
	token := client.NewToken()
	for deadline := time.Now().Add(drainWait); ; {
		err := h.Client.ExpectReceive(ctx, id, token, "prefill", h.Pool, b, 1, 100*time.Millisecond)
		if err == nil {
			break
		}
		if !errors.Is(err, client.ErrUnavailable) || time.Now().After(deadline) { // Unavailable: the peer's handshake runs
			return fmt.Errorf("%s: expect receive %s: %w", h.Name, id, err)
		}
		time.Sleep(time.Millisecond) // pacing while the handshake runs
	}
	f, err := waitReport(ctx, h, id)
	if err != nil {
		return err
	}
	if len(f.Failed) == 0 || len(f.Quarantined) != len(b) {
		return fmt.Errorf("%s: %s was reported %+v, not failed with its %d blocks quarantined", h.Name, id, f, len(b))
	}
	s.Faults = append(s.Faults, fmt.Sprintf("%s: push receive %s never written, its fence cannot reach it: %d blocks quarantined at the hold cap", h.Name, id, len(f.Quarantined)))
	for _, h := range psn {
		// Rank 1 learns of the poison through its watch of the group.
		deadline := time.Now().Add(drainWait)
		var pools []string
		for len(pools) == 0 && time.Now().Before(deadline) {
			st, err := h.Client.Status(ctx)
			if err != nil {
				return fmt.Errorf("%s: status: %w", h.Name, err)
			}
			if pools = st.GetPoisonedPools(); len(pools) == 0 {
				time.Sleep(10 * time.Millisecond) // pacing between polls
			}
		}
		s.PoisonedPools += len(pools)
		_, aerr := h.Client.Alloc(ctx, h.Pool, 1)
		serr := h.Client.ExpectSend(ctx, "after-poison", client.NewToken(), "", h.Pool, []uint32{7}, 1, time.Second)
		if status.Code(aerr) == codes.FailedPrecondition && status.Code(serr) == codes.FailedPrecondition {
			s.PoisonRefused++
		} else {
			s.Faults = append(s.Faults, fmt.Sprintf("%s: new requests on the poisoned pool were answered %v and %v, not FailedPrecondition", h.Name, aerr, serr))
		}
	}
	return nil
}
