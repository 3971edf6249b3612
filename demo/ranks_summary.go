package demo

import (
	"fmt"
	"io"
	"sort"
	"time"
)

// RanksSummary is what a run of RunRanks found.
type RanksSummary struct {
	Requests, OK, Failed int
	// UnionFailed counts requests that succeeded on some decode rank and
	// failed there all the same because another rank failed, timed out or
	// was lost.
	UnionFailed int
	// Disagreed counts requests that did not get the same outcome on every
	// live rank of the decode engine (must be 0).
	Disagreed int
	// Corrupted counts blocks whose bytes were wrong in a request reported
	// finished; InvalidMissing failed requests whose blocks were not all
	// reported invalid or quarantined in the reply that failed them.
	Corrupted, InvalidMissing int
	// Refused says how a rank started with another block size was refused
	// ("" when it was not: a failure of the run).
	Refused string
	// Poisoned lists each rank's poisoned pools at the end (only the
	// poison engine's ranks may have any).
	Poisoned map[string][]string
	// PoisonedPools counts the pools poisoned, summed over the poison
	// engine's ranks (2: one pool, poisoned on both, though only rank 0
	// quarantined a block); PoisonRefused the new requests on it refused
	// with FailedPrecondition (one per rank).
	PoisonedPools, PoisonRefused int
	// Leaks lists what a live host still held once every request was
	// reported, or a host that did not stop cleanly.
	Leaks []string
	// Faults are the rank-level faults injected.
	Faults  []string
	Bytes   int64
	Elapsed time.Duration
}

// Clean reports whether every check passed.
func (s *RanksSummary) Clean() bool {
	return s.Disagreed == 0 && s.Corrupted == 0 && s.InvalidMissing == 0 && s.Refused != "" &&
		s.PoisonedPools == 2 && s.PoisonRefused == 2 && len(s.Leaks) == 0
}

// Print writes the summary.
func (s *RanksSummary) Print(w io.Writer) {
	fmt.Fprintf(w, "ranks demo: %d requests over a prefill engine of 2 ranks and a decode engine of 2 ranks (each rank its own host and transport process, one embedded etcd) in %v\n", s.Requests, s.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "  ok %d, failed %d (union failures: %d succeeded on a rank and failed there because another rank failed), outcomes that differed between ranks: %d\n", s.OK, s.Failed, s.UnionFailed, s.Disagreed)
	fmt.Fprintf(w, "  bytes verified %d, corrupted blocks %d, failed without their invalid blocks %d\n", s.Bytes, s.Corrupted, s.InvalidMissing)
	for _, f := range s.Faults {
		fmt.Fprintf(w, "  fault: %s\n", f)
	}
	names := make([]string, 0, len(s.Poisoned))
	for name := range s.Poisoned {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  poisoned pools on %s: %v\n", name, s.Poisoned[name])
	}
	fmt.Fprintf(w, "  poisoned pools (summed over the poison engine's 2 ranks): %d; new requests on them refused with FailedPrecondition: %d\n", s.PoisonedPools, s.PoisonRefused)
	fmt.Fprintf(w, "  rank with another block size: %s\n", orNot(s.Refused))
	fmt.Fprintf(w, "  leaked resources %d\n", len(s.Leaks))
	for _, l := range s.Leaks {
		fmt.Fprintf(w, "    %s\n", l)
	}
}

func orNot(s string) string {
	if s == "" {
		return "NOT refused"
	}
	return "refused at startup: " + s
}
