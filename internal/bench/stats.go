package bench

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// us formats d in microseconds.
func us(d time.Duration) string { return fmt.Sprintf("%.1fus", float64(d)/float64(time.Microsecond)) }

// signedUs is us with the sign of d always shown.
func signedUs(d time.Duration) string {
	if d >= 0 {
		return "+" + us(d)
	}
	return us(d)
}

// micros is d in microseconds, as a number.
func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// pct is the p-th percentile of ds (nearest rank).
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}

// median is the middle value of xs (the lower middle one of an even
// count).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// ratio is ours/ref with two decimals, "-" without both figures.
func ratio(ours, ref float64) string {
	if ref <= 0 || ours <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", ours/ref)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// goal prints a goal line; atLeast says whether the value must reach the
// target from below (else stay under it).
func goal(out io.Writer, name string, value, target float64, atLeast bool) {
	met := value <= target
	if atLeast {
		met = value >= target
	}
	fmt.Fprintf(out, "goal name=%s value=%.3f target=%g met=%s\n", name, value, target, yesNo(met))
}
