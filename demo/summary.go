package demo

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Summary is what a run found.
type Summary struct {
	Requests, OK, Failed int
	Pulls, Pushes        int
	Handles              int
	FailuresByReason     map[string]int
	Faults               map[string][]string
	Fences, Restarts     uint64
	Bytes                int64
	Elapsed              time.Duration
	// Corrupted counts blocks whose bytes were wrong when their request
	// finished or at the final audit.
	Corrupted int
	// InvalidMissing counts failed receives whose blocks were not all
	// reported invalid in the report that failed them.
	InvalidMissing int
	// Duplicates counts requests reported more than once.
	Duplicates int
	// Lost counts requests with no report within a minute.
	Lost int
	// Kills counts transport processes killed from outside (SIGKILL).
	Kills int
	// Fired counts, per host and fault kind, how often the fake's fault
	// rules fired (from its fault_log), crashes included.
	Fired map[string]map[string]int
	// Quarantined blocks, never handed back.
	Quarantined int
	// Leaks lists what a host still held at the end.
	Leaks []string
}

// Clean reports whether the run found no corruption, no missing invalid
// report, no duplicate report and no leak.
func (s *Summary) Clean() bool {
	return s.Corrupted == 0 && s.InvalidMissing == 0 && s.Duplicates == 0 && s.Lost == 0 && len(s.Leaks) == 0
}

// classify names a failure reason by its kind.
func classify(reason string) string {
	for _, k := range []string{"hold cap", "fenced", "REMOTE_DISCONNECT", "peer removed", "lease", "incompatible", "PLUGIN_SHUTDOWN", "BACKEND"} {
		if strings.Contains(reason, k) {
			return k
		}
	}
	return "other"
}

// Print writes the summary.
func (s *Summary) Print(w interface{ Write([]byte) (int, error) }) {
	fmt.Fprintf(w, "requests   %d (%d pulls, %d pushes, %d transfer handles)\n", s.Requests, s.Pulls, s.Pushes, s.Handles)
	fmt.Fprintf(w, "ok         %d\nfailed     %d\n", s.OK, s.Failed)
	reasons := make([]string, 0, len(s.FailuresByReason))
	for k := range s.FailuresByReason {
		reasons = append(reasons, k)
	}
	sort.Strings(reasons)
	for _, k := range reasons {
		fmt.Fprintf(w, "  %-20s %d\n", k, s.FailuresByReason[k])
	}
	for _, h := range []string{"prefill", "decode"} {
		for _, f := range s.Faults[h] {
			fmt.Fprintf(w, "fault      %-8s %s\n", h, f)
		}
	}
	for _, h := range []string{"prefill", "decode"} {
		if len(s.Fired[h]) == 0 {
			continue
		}
		var kinds []string
		for k, n := range s.Fired[h] {
			kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
		}
		sort.Strings(kinds)
		fmt.Fprintf(w, "fired      %-8s %s\n", h, strings.Join(kinds, " "))
	}
	fmt.Fprintf(w, "kills      %d (SIGKILL from outside)\n", s.Kills)
	fmt.Fprintf(w, "fences     %d (transport restarts %d)\n", s.Fences, s.Restarts)
	mbs := float64(s.Bytes) / s.Elapsed.Seconds() / 1e6
	fmt.Fprintf(w, "bytes      %d verified in %v (%.1f MB/s)\n", s.Bytes, s.Elapsed.Round(time.Millisecond), mbs)
	fmt.Fprintf(w, "quarantined blocks %d\n", s.Quarantined)
	fmt.Fprintf(w, "corrupted blocks   %d\n", s.Corrupted)
	fmt.Fprintf(w, "missing invalid    %d\n", s.InvalidMissing)
	fmt.Fprintf(w, "duplicate reports  %d\n", s.Duplicates)
	fmt.Fprintf(w, "lost reports       %d\n", s.Lost)
	fmt.Fprintf(w, "leaked resources   %d\n", len(s.Leaks))
	for _, l := range s.Leaks {
		fmt.Fprintf(w, "  %s\n", l)
	}
}
