package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/custody-dev/custody/client"
	"github.com/custody-dev/custody/internal/cluster"
)

// split cuts local and remote block lists into parts transfers.
func split(pool uint32, local, remote []uint32, parts int) []client.Part {
	out := make([]client.Part, 0, parts)
	per := (len(local) + parts - 1) / parts
	for lo := 0; lo < len(local); lo += per {
		hi := min(lo+per, len(local))
		out = append(out, client.Part{Pool: pool, Local: local[lo:hi], Remote: remote[lo:hi]})
	}
	return out
}

func (r *runner) randomBlocks(rng *rand.Rand, n int) [][]byte {
	data := make([][]byte, n)
	for i := range data {
		data[i] = make([]byte, r.o.BlockSize)
		for k := 0; k < len(data[i]); k += 8 {
			v := rng.Uint64()
			for j := 0; j < 8 && k+j < len(data[i]); j++ {
				data[i][k+j] = byte(v >> (8 * j))
			}
		}
	}
	return data
}

// retry runs an engine call until it succeeds or fails with something other
// than Unavailable (a transport restarting, a peer's first handshake
// running) or a failed handshake (the soak's faults fail some: the host
// tries again on the first call past its backoff). Both took nothing.
func retry(ctx context.Context, call func(ctx context.Context) error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := call(cctx)
		cancel()
		again := status.Code(err) == codes.Unavailable || errors.Is(err, client.ErrHandshakeFailed)
		if err == nil || !again || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond) // a transport restarts in milliseconds
	}
}

func (r *runner) alloc(ctx context.Context, h *cluster.Host, n int) ([]uint32, error) {
	var b []uint32
	err := retry(ctx, func(ctx context.Context) (err error) {
		b, err = h.Client.Alloc(ctx, h.Pool, n)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: alloc %d blocks: %w", h.Name, n, err)
	}
	return b, nil
}

// source takes n prefill blocks and fills them with random bytes.
func (r *runner) source(ctx context.Context, n int, rng *rand.Rand) ([]uint32, [][]byte, error) {
	pb, err := r.alloc(ctx, r.prefill, n)
	if err != nil {
		return nil, nil, err
	}
	data := r.randomBlocks(rng, n)
	return pb, data, r.prefill.WriteBlocks(pb, data, r.o.BlockSize)
}

func (r *runner) pull(ctx context.Context, id string, n, parts int, rng *rand.Rand) error {
	pb, data, err := r.source(ctx, n, rng)
	if err != nil {
		return err
	}
	sent := r.pd.expect(id, nil)
	token := client.NewToken()
	if err := retry(ctx, func(ctx context.Context) error {
		return r.prefill.Client.ExpectSend(ctx, id, token, "", r.prefill.Pool, pb, 1, 2*time.Second)
	}); err != nil {
		return fmt.Errorf("%s: expect send: %w", id, err)
	}
	db, err := r.alloc(ctx, r.decode, n)
	if err != nil {
		return err
	}
	recv := r.dd.expect(id, db)
	if err := retry(ctx, func(ctx context.Context) error {
		return r.decode.Client.Read(ctx, id, token, "prefill", true, split(r.decode.Pool, db, pb, parts)...)
	}); err != nil {
		return fmt.Errorf("%s: read: %w", id, err)
	}
	r.count(func(s *Summary) { s.Pulls++; s.Handles += parts })
	if err := r.finishReceive(ctx, id, r.decode, db, data, recv); err != nil {
		return err
	}
	if _, err := wait(ctx, id, sent); err != nil {
		return err
	}
	return r.free(ctx, r.prefill, pb)
}

func (r *runner) push(ctx context.Context, id string, n, parts int, rng *rand.Rand) error {
	db, err := r.alloc(ctx, r.decode, n)
	if err != nil {
		return err
	}
	recv := r.dd.expect(id, db)
	token := client.NewToken()
	if err := retry(ctx, func(ctx context.Context) error {
		return r.decode.Client.ExpectReceive(ctx, id, token, "prefill", r.decode.Pool, db, 1, 2*time.Second)
	}); err != nil {
		return fmt.Errorf("%s: expect receive: %w", id, err)
	}
	pb, data, err := r.source(ctx, n, rng)
	if err != nil {
		return err
	}
	sent := r.pd.expect(id, nil)
	if err := retry(ctx, func(ctx context.Context) error {
		return r.prefill.Client.Write(ctx, id, token, "decode", 1, time.Second, split(r.prefill.Pool, pb, db, parts)...)
	}); err != nil {
		return fmt.Errorf("%s: write: %w", id, err)
	}
	r.count(func(s *Summary) { s.Pushes++; s.Handles += parts })
	// The consumer's outcome is the request's: its blocks hold the bytes, or
	// come back invalid once no write can reach them.
	if err := r.finishReceive(ctx, id, r.decode, db, data, recv); err != nil {
		return err
	}
	if _, err := wait(ctx, id, sent); err != nil {
		return err
	}
	return r.free(ctx, r.prefill, pb)
}

// finishReceive waits for a receive's outcome and checks it: the bytes when
// it finished, the invalid report when it failed.
func (r *runner) finishReceive(ctx context.Context, id string, h *cluster.Host, blocks []uint32, data [][]byte, ch <-chan outcome) error {
	o, err := wait(ctx, id, ch)
	if err != nil {
		return err
	}
	if o.ok {
		return r.check(ctx, id, h, blocks, data)
	}
	r.failed(o.reason)
	if !o.invalidOK {
		r.count(func(s *Summary) { s.InvalidMissing++ })
	}
	back := blocks[:0:0]
	for _, b := range blocks {
		if !o.quarantined[b] { // quarantined blocks never come back
			back = append(back, b)
		}
	}
	if len(back) == 0 {
		return nil
	}
	return r.free(ctx, h, back)
}

// check verifies a finished request's blocks and keeps them for the audit.
func (r *runner) check(ctx context.Context, id string, h *cluster.Host, blocks []uint32, data [][]byte) error {
	got, err := h.ReadBlocks(blocks, r.o.BlockSize)
	if err != nil {
		return err
	}
	bad := 0
	for i := range data {
		if !bytes.Equal(got[i], data[i]) {
			bad++
		}
	}
	r.count(func(s *Summary) {
		s.OK++
		s.Corrupted += bad
		s.Bytes += int64(len(blocks) * r.o.BlockSize)
	})
	r.mu.Lock()
	r.kept = append(r.kept, kept{id: id, blocks: blocks, data: data})
	var old []kept
	if r.o.Soak && len(r.kept) > r.o.Window {
		old = slices.Clone(r.kept[:len(r.kept)-r.o.Window])
		r.kept = slices.Delete(r.kept, 0, len(old))
	}
	r.mu.Unlock()
	// Under Soak, blocks checked Window requests ago are audited once more
	// and go back to the engine for reuse.
	for _, k := range old {
		if bad := r.auditOne(k); bad > 0 {
			r.count(func(s *Summary) { s.Corrupted += bad })
		}
		if err := r.free(ctx, r.decode, k.blocks); err != nil {
			return err
		}
	}
	return nil
}

// audit reads every kept block again: a transfer released too early may have
// written into it after its request was checked.
func (r *runner) audit() {
	for _, k := range r.kept {
		r.s.Corrupted += r.auditOne(k)
	}
}

// auditOne reads k's blocks again and counts those that changed.
func (r *runner) auditOne(k kept) int {
	got, err := r.decode.ReadBlocks(k.blocks, r.o.BlockSize)
	if err != nil {
		return len(k.blocks)
	}
	bad := 0
	for i := range k.data {
		if !bytes.Equal(got[i], k.data[i]) {
			bad++
		}
	}
	return bad
}

func (r *runner) free(ctx context.Context, h *cluster.Host, blocks []uint32) error {
	if err := retry(ctx, func(ctx context.Context) error { return h.Client.Free(ctx, h.Pool, blocks) }); err != nil {
		return fmt.Errorf("%s: free: %w", h.Name, err)
	}
	return nil
}

func (r *runner) failed(reason string) {
	r.count(func(s *Summary) { s.Failed++; s.FailuresByReason[classify(reason)]++ })
}

func (r *runner) count(f func(*Summary)) {
	r.mu.Lock()
	f(r.s)
	r.mu.Unlock()
}

// errLost is a request's report that never came.
var errLost = errors.New("no report within 60s")

func wait(ctx context.Context, id string, ch <-chan outcome) (outcome, error) {
	select {
	case o := <-ch:
		return o, nil
	case <-time.After(60 * time.Second):
		return outcome{}, fmt.Errorf("%s: %w", id, errLost)
	case <-ctx.Done():
		return outcome{}, ctx.Err()
	}
}
