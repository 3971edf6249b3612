package conformance

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// Status is the outcome of one check. A check the transport does not claim
// is skipped, never passed (fabtests' "not run").
type Status string

const (
	// StatusPass: the check ran and found nothing wrong.
	StatusPass Status = "pass"
	// StatusSkip: the check did not run; Result.Message says why (the
	// transport does not claim what it tests, or it could not be observed).
	StatusSkip Status = "skip"
	// StatusFail: the check found a violation; Result.Message is the first.
	StatusFail Status = "fail"
)

// Result is one check's record.
type Result struct {
	// Name is group/name, for example "contract/release-running-busy".
	Name string `json:"name"`
	// Group is the capability the check tests ("data", "cancel", ...).
	Group string `json:"group"`
	// Doc says what the check holds the transport to.
	Doc    string `json:"doc"`
	Status Status `json:"status"`
	// Message is the first failure, or the reason for a skip.
	Message  string        `json:"message,omitempty"`
	Duration time.Duration `json:"duration_ns"`
	// Log is every message the check wrote, failures included.
	Log []string `json:"log,omitempty"`
}

// Report is the outcome of one Execute.
type Report struct {
	Transport sdk.Description   `json:"transport"`
	Params    map[string]string `json:"params,omitempty"`
	Results   []Result          `json:"results"`
}

// Counts returns how many checks passed, were skipped and failed.
func (r *Report) Counts() (pass, skip, fail int) {
	for _, res := range r.Results {
		switch res.Status {
		case StatusPass:
			pass++
		case StatusSkip:
			skip++
		case StatusFail:
			fail++
		}
	}
	return pass, skip, fail
}

// Failed reports whether any check failed.
func (r *Report) Failed() bool {
	_, _, fail := r.Counts()
	return fail > 0
}

// groups returns the results grouped by capability, groups in the order
// they first appear.
func (r *Report) groups() (names []string, by map[string][]Result) {
	by = map[string][]Result{}
	for _, res := range r.Results {
		if _, ok := by[res.Group]; !ok {
			names = append(names, res.Group)
		}
		by[res.Group] = append(by[res.Group], res)
	}
	return names, by
}

// WriteTable writes a table per capability (pass, skip with its reason,
// fail with its first failure) and the totals.
func (r *Report) WriteTable(w io.Writer) error {
	d := r.Transport
	var params []string
	for k, v := range r.Params {
		params = append(params, k+"="+v)
	}
	sort.Strings(params)
	fmt.Fprintf(w, "transport %s %s (contract %d.%d)", d.Name, d.Version, d.ContractMajor, d.ContractMinor)
	if len(params) > 0 {
		fmt.Fprintf(w, ", params %s", strings.Join(params, " "))
	}
	fmt.Fprintln(w)
	names, by := r.groups()
	for _, g := range names {
		fmt.Fprintf(w, "\n%s\n", g)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, res := range by[g] {
			msg := res.Message
			if i := strings.IndexByte(msg, '\n'); i >= 0 {
				msg = msg[:i] + " ..."
			}
			line := fmt.Sprintf("  %s\t%s\t%s", strings.ToUpper(string(res.Status)), res.Name, res.Duration.Round(time.Millisecond))
			if msg != "" {
				line += "\t" + msg
			}
			fmt.Fprintln(tw, line)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	pass, skip, fail := r.Counts()
	_, err := fmt.Fprintf(w, "\ntotal: %d checks, %d passed, %d skipped, %d failed\n", len(r.Results), pass, skip, fail)
	return err
}

// WriteJSON writes the report as one JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
