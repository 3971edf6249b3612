package demo

import (
	"strings"
)

// faults are the fake's fault rules per host: every kind at least once. The
// decode host reads (pull) and is written into (push); the prefill host is
// read from and writes.
func faults(unsafe bool) map[string][]string {
	decode := []string{
		"fail,after=1,post=3",
		"disconnect,after=1,post=7",
		"release-fail,count=2,post=11",
		"poll-fail,count=3,post=15",
		"stall,for=300ms,prob=0.08",
		"stall,post=60",
		"prepare-fail,rank=1",
		"notif-drop,prob=0.05",
		"notif-delay,for=100ms,prob=0.05",
	}
	if unsafe {
		decode = []string{"stall,for=300ms,prob=0.3"}
	}
	prefill := []string{
		"load-peer-fail,rank=0",
		"fail,after=0,post=5",
		"crash,at=post,n=20",
	}
	if unsafe {
		prefill = nil
	}
	return map[string][]string{"decode": decode, "prefill": prefill}
}

// faultParam joins fault rules into the fake's fault= parameter.
func faultParam(rules ...string) string { return strings.Join(rules, ";") }
