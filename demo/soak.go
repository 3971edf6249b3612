package demo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// soakFaults are the fake's fault rules per host for a soak: every kind,
// drawn by probability (or, for crashes, every so many calls of each
// process's life) so that each fires all along the run.
func soakFaults() map[string][]string {
	return map[string][]string{
		"decode": {
			"fail,after=1,prob=0.01",
			"disconnect,after=1,prob=0.02",
			"release-fail,count=2,prob=0.02",
			"poll-fail,count=3,prob=0.02",
			"stall,for=300ms,prob=0.03",
			"stall,prob=0.002",
			"post-fail,prob=0.03",
			"prepare-fail,prob=0.2",
			"load-peer-fail,prob=0.2",
			"unload-fail,prob=0.3,count=1000",
			"release-dlist-fail,prob=0.3,count=1000",
			"notif-drop,prob=0.02",
			"notif-delay,for=100ms,prob=0.03",
		},
		"prefill": {
			"load-peer-fail,prob=0.2",
			"prepare-fail,prob=0.2",
			"fail,after=0,prob=0.01",
			"post-fail,prob=0.03",
			"notif-drop,prob=0.02",
			"unload-fail,prob=0.3,count=1000",
			"release-dlist-fail,prob=0.3,count=1000",
			"crash,at=post,n=40",
		},
	}
}

// faultKinds are every kind of fault the fake injects, as fault_log names
// them: a soak must see each fire.
var faultKinds = []string{"stall", "fail", "disconnect", "release-fail", "poll-fail", "load-peer-fail", "prepare-fail",
	"notif-drop", "notif-delay", "crash", "post-fail", "unload-fail", "release-dlist-fail"}

// firedFaults reads each host's fault_log: how often each kind fired.
func firedFaults(dir string) (map[string]map[string]int, error) {
	out := map[string]map[string]int{}
	for _, h := range []string{"prefill", "decode"} {
		raw, err := os.ReadFile(filepath.Join(dir, h+".faults"))
		if errors.Is(err, os.ErrNotExist) {
			continue // no rule fired there
		}
		if err != nil {
			return nil, fmt.Errorf("%s: fault log: %w", h, err)
		}
		out[h] = map[string]int{}
		for _, k := range strings.Fields(string(raw)) {
			out[h][k]++
		}
	}
	return out, nil
}

// MissingFaults lists the fault kinds that never fired on either host.
func (s *Summary) MissingFaults() []string {
	var out []string
	for _, k := range faultKinds {
		if s.Fired["prefill"][k]+s.Fired["decode"][k] == 0 {
			out = append(out, k)
		}
	}
	return out
}

// SoakVerdict is a soak's pass or fail: nothing corrupted, no failure
// without its invalid blocks, every request reported exactly once,
// nothing leaked, every fault kind fired (when everyKind: a short run may
// miss the rarer ones), every one of kills landed, and the outcomes add up
// to the requests run. The line sums the figures up.
func (s *Summary) SoakVerdict(kills int, everyKind bool) (string, error) {
	crashes := s.Fired["prefill"]["crash"] + s.Fired["decode"]["crash"]
	verdict := fmt.Sprintf("%d requests (%d ok, %d failed), %d transport kills + %d crash faults, %d corrupted, %d leaked, %d lost, %d duplicate, %d without invalid blocks",
		s.Requests, s.OK, s.Failed, s.Kills, crashes, s.Corrupted, len(s.Leaks), s.Lost, s.Duplicates, s.InvalidMissing)
	switch {
	case !s.Clean():
		return verdict, fmt.Errorf("soak failed: %s", verdict)
	case everyKind && len(s.MissingFaults()) > 0:
		return verdict, fmt.Errorf("soak failed: fault kinds that never fired: %v; run more requests (%s)", s.MissingFaults(), verdict)
	case s.Kills < kills:
		return verdict, fmt.Errorf("soak failed: %d of %d kills landed, a host had no transport process to kill (%s)", s.Kills, kills, verdict)
	case s.OK+s.Failed+s.Lost != s.Requests:
		return verdict, fmt.Errorf("soak failed: ok, failed and lost do not add up to the requests run (%s)", verdict)
	}
	return verdict, nil
}
