package fake

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// faultKind names what a fault rule does.
type faultKind string

// The fault kinds, as named in the fault parameter.
const (
	faultStall        faultKind = "stall"
	faultFail         faultKind = "fail"
	faultDisconnect   faultKind = "disconnect"
	faultReleaseFail  faultKind = "release-fail"
	faultPollFail     faultKind = "poll-fail"
	faultLoadPeerFail faultKind = "load-peer-fail"
	faultPrepareFail  faultKind = "prepare-fail"
	faultNotifDrop    faultKind = "notif-drop"
	faultNotifDelay   faultKind = "notif-delay"
	faultCrash        faultKind = "crash"
	faultPostFail     faultKind = "post-fail"
	faultUnloadFail   faultKind = "unload-fail"
	faultReleaseDlist faultKind = "release-dlist-fail"
)

// faultKeys lists, per kind, the settings a rule of that kind accepts.
// Transfer kinds are selected at Post, per transfer; post-fail at Post, per
// item, before the transfer exists; load-peer-fail, prepare-fail,
// unload-fail and release-dlist-fail per item; crash per call.
var faultKeys = map[faultKind][]string{
	faultStall:        {"post", "peer", "prob", "times", "for"},
	faultFail:         {"post", "peer", "prob", "times", "after", "code"},
	faultDisconnect:   {"post", "peer", "prob", "times", "after"},
	faultReleaseFail:  {"post", "peer", "prob", "times", "count"},
	faultPollFail:     {"post", "peer", "prob", "times", "count"},
	faultLoadPeerFail: {"peer", "prob", "times", "rank"},
	faultPrepareFail:  {"peer", "prob", "times", "rank"},
	faultNotifDrop:    {"post", "peer", "prob", "times"},
	faultNotifDelay:   {"post", "peer", "prob", "times", "for"},
	faultCrash:        {"at", "n"},
	faultPostFail:     {"post", "peer", "prob", "times", "code"},
	faultUnloadFail:   {"peer", "prob", "count"},
	faultReleaseDlist: {"peer", "prob", "count"},
}

// countsItems reports whether rules of kind k fail count items in all:
// their count setting bounds how often they fire.
func countsItems(k faultKind) bool { return k == faultUnloadFail || k == faultReleaseDlist }

// Call kinds a crash rule may fire at.
const (
	crashAtPost    = "post"
	crashAtPoll    = "poll"
	crashAtRelease = "release"
)

// rule is one parsed fault rule: a kind, its selectors and its settings. A
// rule is a small value; an agent holds its rules in the order given and
// keeps per rule how often it fired.
type rule struct {
	text string
	kind faultKind

	// Selectors; zero values select everything.
	post    int
	peer    string
	prob    float64
	hasProb bool
	times   int

	// Settings of the kind.
	dur     time.Duration
	hasDur  bool
	after   int
	code    sdk.Code
	count   int
	rank    int
	hasRank bool
	at      string
	n       int

	// fired counts how often the rule applied, against times.
	fired int
}

// parseRules parses the fault parameter: rules separated by ';'. An error
// names the offending rule by position and text.
func parseRules(v string) ([]rule, error) {
	var rules []rule
	for i, text := range strings.Split(v, ";") {
		text = strings.TrimSpace(text)
		if text == "" {
			continue
		}
		r, err := parseRule(text)
		if err != nil {
			return nil, fmt.Errorf("fault rule %d %q: %w", i+1, text, err)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// parseRule parses one rule: KIND followed by ",key=value" settings.
func parseRule(text string) (rule, error) {
	parts := strings.Split(text, ",")
	r := rule{text: text, kind: faultKind(strings.TrimSpace(parts[0])), code: sdk.CodeBackend, count: 1, n: 1, at: crashAtPost}
	keys, ok := faultKeys[r.kind]
	if !ok {
		return rule{}, fmt.Errorf("unknown kind %q; known: stall, fail, disconnect, release-fail, poll-fail, load-peer-fail, prepare-fail, notif-drop, notif-delay, crash, post-fail, unload-fail, release-dlist-fail", r.kind)
	}
	seen := map[string]bool{}
	for _, kv := range parts[1:] {
		k, val, found := strings.Cut(strings.TrimSpace(kv), "=")
		if !found {
			return rule{}, fmt.Errorf("setting %q is not key=value", kv)
		}
		if !contains(keys, k) {
			return rule{}, fmt.Errorf("kind %s takes no key %q; it takes %s", r.kind, k, strings.Join(keys, ", "))
		}
		if seen[k] {
			return rule{}, fmt.Errorf("key %q given twice", k)
		}
		seen[k] = true
		if err := r.set(k, val); err != nil {
			return rule{}, fmt.Errorf("%s=%q: %w", k, val, err)
		}
	}
	if r.kind == faultNotifDelay && !r.hasDur {
		return rule{}, fmt.Errorf("notif-delay needs for=DUR")
	}
	if countsItems(r.kind) {
		r.times = r.count
	}
	return r, nil
}

// set applies one key=value setting to r.
func (r *rule) set(k, v string) error {
	var err error
	switch k {
	case "post":
		r.post, err = positive(v)
	case "peer":
		if v == "" {
			return fmt.Errorf("want an agent name")
		}
		r.peer = v
	case "prob":
		r.prob, err = strconv.ParseFloat(v, 64)
		if err != nil || r.prob < 0 || r.prob > 1 {
			return fmt.Errorf("want a probability between 0 and 1")
		}
		r.hasProb = true
	case "times":
		r.times, err = positive(v)
	case "for":
		r.dur, err = time.ParseDuration(v)
		if err != nil || r.dur < 0 {
			return fmt.Errorf("want a non-negative Go duration such as 10ms")
		}
		r.hasDur = true
	case "after":
		r.after, err = nonNegative(v)
	case "code":
		r.code, err = parseCode(v)
	case "count":
		r.count, err = positive(v)
	case "rank":
		r.rank, err = nonNegative(v)
		r.hasRank = true
	case "at":
		if v != crashAtPost && v != crashAtPoll && v != crashAtRelease {
			return fmt.Errorf("want post, poll or release")
		}
		r.at = v
	case "n":
		r.n, err = positive(v)
	}
	return err
}

// selects reports whether r applies to a candidate: the post-th transfer
// (0 when the candidate is not a transfer) with peer agent peer, or the
// rank-th item of a handshake call (-1 when not one). It draws from rng only
// when every other selector matched, so a run replays exactly, and counts
// the firing against times.
func (r *rule) selects(rng *rand.Rand, post int, peer string, rank int) bool {
	if r.times > 0 && r.fired >= r.times {
		return false
	}
	if r.post > 0 && r.post != post {
		return false
	}
	if r.peer != "" && r.peer != peer {
		return false
	}
	if r.hasRank && r.rank != rank {
		return false
	}
	if r.hasProb && rng.Float64() >= r.prob {
		return false
	}
	r.fired++
	return true
}

// parseCode parses an error code by name (BACKEND, REMOTE_DISCONNECT, ...).
func parseCode(v string) (sdk.Code, error) {
	for c := sdk.CodeBusy; c <= sdk.CodePluginShutdown; c++ {
		if strings.EqualFold(c.String(), v) {
			return c, nil
		}
	}
	return 0, fmt.Errorf("want an error code name such as BACKEND or REMOTE_DISCONNECT")
}

func positive(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("want a positive integer")
	}
	return n, nil
}

func nonNegative(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("want a non-negative integer")
	}
	return n, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// faultFired appends r's kind to the fault_log file, one line per firing,
// in one write, so that agents sharing the file never interleave their
// lines. A crash is logged before the process exits.
func (t *Transport) faultFired(r *rule) {
	if t.faultLog != nil {
		_, _ = t.faultLog.Write([]byte(string(r.kind) + "\n"))
	}
}
