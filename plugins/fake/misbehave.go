package fake

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// misbehave is a deliberate contract violation, so that the conformance
// suite can prove it catches each one.
type misbehave string

// The misbehaving modes, as named by the misbehave parameter.
const (
	misbehaveNone             misbehave = ""
	misbehaveReleaseRunning   misbehave = "release-running"
	misbehaveReuseIDs         misbehave = "reuse-ids"
	misbehaveEarlyDone        misbehave = "early-done"
	misbehaveTerminalFlip     misbehave = "terminal-flip"
	misbehaveTerminalFlipNext misbehave = "terminal-flip-next"
	misbehaveCancelTerminal   misbehave = "cancel-terminal"
	misbehaveUnpinTerminal    misbehave = "unpin-terminal"
	misbehaveCloseLax         misbehave = "close-lax"
	misbehaveUngated          misbehave = "ungated"
	misbehaveOpenLax          misbehave = "open-lax"
	misbehaveCancelSlow       misbehave = "cancel-slow"
	misbehaveCancelLie        misbehave = "cancel-lie"
	misbehaveFenceLie         misbehave = "fence-lie"
	misbehavePeerLossLie      misbehave = "peer-loss-lie"
	misbehaveDropNote         misbehave = "drop-notification"
)

// misbehaveModes lists every mode, in the order the docs give them.
var misbehaveModes = []misbehave{
	misbehaveReleaseRunning, misbehaveReuseIDs, misbehaveEarlyDone, misbehaveTerminalFlip, misbehaveTerminalFlipNext,
	misbehaveCancelTerminal, misbehaveUnpinTerminal, misbehaveCloseLax, misbehaveUngated,
	misbehaveOpenLax, misbehaveCancelSlow, misbehaveCancelLie, misbehaveFenceLie,
	misbehavePeerLossLie, misbehaveDropNote,
}

// reuseAfter is how many posts an agent in reuse-ids mode makes before it
// hands out a released handle id again.
const reuseAfter = 64

// flipAfter is how long after a Poll first reported a handle DONE
// misbehave=terminal-flip reports it FAILED.
const flipAfter = 20 * time.Millisecond

// parseMisbehave parses the misbehave parameter: MODE, or MODE:P to break
// the rule only at each chance with probability P (0 < P <= 1).
func parseMisbehave(v string) (misbehave, float64, error) {
	name, prob, hasProb := strings.Cut(v, ":")
	p := 1.0
	if hasProb {
		f, err := strconv.ParseFloat(prob, 64)
		if err != nil || f <= 0 || f > 1 {
			return "", 0, fmt.Errorf("probability %q: want a number in (0, 1], as in MODE:0.1", prob)
		}
		p = f
	}
	m := misbehave(name)
	if m == misbehaveNone && !hasProb {
		return m, p, nil
	}
	for _, k := range misbehaveModes {
		if m == k {
			return m, p, nil
		}
	}
	known := make([]string, len(misbehaveModes))
	for i, k := range misbehaveModes {
		known[i] = string(k)
	}
	return "", 0, fmt.Errorf("unknown mode %q; known: %s (each optionally :P)", name, strings.Join(known, ", "))
}

// MisbehaveEnv is the environment variable the plugin binary reads at
// start: a mode for WithMisbehave, so that a launched agent breaks its rule
// before Open too.
const MisbehaveEnv = "CUSTODY_FAKE_MISBEHAVE"

// WithMisbehave makes the agent break a rule from New on, before Open as
// well, as the misbehave parameter would from Open: Open brings the
// parameters, so a rule about calls before Open can only be broken from
// construction. The mode is also Open's misbehave parameter unless Open
// gives one. An unknown mode is an error naming it.
func WithMisbehave(mode string) (Option, error) {
	m, p, err := parseMisbehave(mode)
	if err != nil {
		return nil, fmt.Errorf("fake: misbehave %q: %w", mode, err)
	}
	return func(t *Transport) {
		t.p.misbehave, t.p.misbehaveP, t.early = m, p, mode
	}, nil
}

// misbehaves reports whether the agent breaks the rule of mode m at this
// chance: always under misbehave=m, with its probability under
// misbehave=m:P. Called with t.mu held (it draws from t.rng).
func (t *Transport) misbehaves(m misbehave) bool {
	if t.p.misbehave != m {
		return false
	}
	return t.p.misbehaveP >= 1 || t.rng.Float64() < t.p.misbehaveP
}
