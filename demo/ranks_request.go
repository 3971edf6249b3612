package demo

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/custody-dev/custody/client"
	"github.com/custody-dev/custody/internal/cluster"
)

// runRankRequest runs one logical pull: each prefill rank pins blocksPer
// blocks per decode rank, each decode rank reads its blocks from both
// prefill ranks. kill: decode rank 1 is killed once it has issued its part.
func runRankRequest(ctx context.Context, s *RanksSummary, o Options, pre, dec []*cluster.Host, id string, i, n int, kill bool) error {
	rng := rand.New(rand.NewPCG(o.Seed, uint64(i)))
	token := client.NewToken()        // one logical request: the same token on every rank
	src := make([][][]byte, len(pre)) // [prefill rank][block]
	pb := make([][]uint32, len(pre))
	for r, p := range pre {
		b, err := p.Client.Alloc(ctx, p.Pool, n*len(dec))
		if err != nil {
			return fmt.Errorf("%s: alloc: %w", p.Name, err)
		}
		pb[r] = b
		src[r] = make([][]byte, len(b))
		for k := range b {
			src[r][k] = make([]byte, o.BlockSize)
			for j := 0; j < o.BlockSize; j += 8 {
				v := rng.Uint64()
				copy(src[r][k][j:], []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24), byte(v >> 32), byte(v >> 40), byte(v >> 48), byte(v >> 56)})
			}
		}
		if err := p.WriteBlocks(b, src[r], o.BlockSize); err != nil {
			return err
		}
		if err := p.Client.ExpectSend(ctx, id, token, "", p.Pool, b, len(dec), 5*time.Second); err != nil {
			return fmt.Errorf("%s: expect send %s: %w", p.Name, id, err)
		}
	}
	dst := make([][]uint32, len(dec))
	for q, d := range dec {
		b, err := d.Client.Alloc(ctx, d.Pool, n*len(pre))
		if err != nil {
			return fmt.Errorf("%s: alloc: %w", d.Name, err)
		}
		dst[q] = b
		var parts []client.Part
		for r := range pre {
			parts = append(parts, client.Part{Pool: d.Pool, Local: b[r*n : (r+1)*n], Rank: uint32(r), Remote: pb[r][q*n : (q+1)*n]})
		}
		if err := d.Client.Read(ctx, id, token, "prefill", true, parts...); err != nil {
			return fmt.Errorf("%s: read %s: %w", d.Name, id, err)
		}
	}
	live := dec
	if kill {
		_ = dec[1].Kill()
		s.Faults = append(s.Faults, fmt.Sprintf("dec-1 killed (SIGKILL) mid-request %s", id))
		live = dec[:1]
	}
	outcomes := make([]string, len(live))
	for q, d := range live {
		f, err := waitReport(ctx, d, id)
		if err != nil {
			return err
		}
		failed := len(f.Failed) > 0
		outcomes[q] = map[bool]string{false: "ok", true: "failed"}[failed]
		if failed {
			if strings.Contains(f.Failed[0].Reason, "failed on another rank") {
				s.UnionFailed++
			}
			if len(f.InvalidBlocks)+len(f.Quarantined) != len(dst[q]) {
				s.InvalidMissing++
			}
			continue
		}
		got, err := d.ReadBlocks(dst[q], o.BlockSize)
		if err != nil {
			return err
		}
		for r := range pre {
			for k := range n {
				if !bytes.Equal(got[r*n+k], src[r][q*n+k]) {
					s.Corrupted++
				}
				s.Bytes += int64(o.BlockSize)
			}
		}
	}
	for _, oc := range outcomes[1:] {
		if oc != outcomes[0] {
			s.Disagreed++
		}
	}
	if outcomes[0] == "ok" {
		s.OK++
	} else {
		s.Failed++
	}
	return nil
}

// waitReport polls d's finished reports until id is reported.
func waitReport(ctx context.Context, d *cluster.Host, id string) (client.Finished, error) {
	deadline := time.Now().Add(30 * time.Second)
	var acc client.Finished
	for {
		f, err := d.Client.GetFinished(ctx)
		if err != nil {
			return acc, fmt.Errorf("%s: finished: %w", d.Name, err)
		}
		// A failed receive is listed in FinishedRecving too (vLLM's
		// contract): look at the failures first.
		for _, x := range f.Failed {
			if x.Request == id {
				return client.Finished{Failed: []client.Failure{x}, InvalidBlocks: f.InvalidBlocks, Quarantined: f.Quarantined}, nil
			}
		}
		for _, x := range f.FinishedRecving {
			if x == id {
				return client.Finished{FinishedRecving: []string{id}}, nil
			}
		}
		if time.Now().After(deadline) {
			return acc, fmt.Errorf("%s: request %s not reported within 30s", d.Name, id)
		}
		time.Sleep(time.Millisecond) // pacing between polls, as an engine step does
	}
}
