// Command explorebreaks shows that core's explorer finds the rules it
// checks broken: it makes each one-line break of breaks (a condition
// dropped, a state set early, an error ignored) in a scratch worktree of
// HEAD, runs the explorer's CI bound on it, and prints what found the
// break and after how many inputs. It exits non-zero when a break is not
// found, or when one no longer applies to the code (its text changed).
//
//	go run ./scripts/explorebreaks [-run REGEXP]   (make explore-breaks)
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// brk is one break: the nth (from 1) occurrence of old in file becomes new.
type brk struct {
	name, rule, file, old, new string
	nth                        int
}

var breaks = []brk{
	{name: "fence does not detach", rule: "14", file: "core/fence.go",
		old: "c.attached, c.events = false, false", new: "c.events = false"},
	{name: "a terminal poll answer of a handle not yet terminal is ignored", rule: "1", file: "core/round.go",
		old: "x.state.Terminal() || !st.Terminal()", new: "x.state.Terminal()"},
	{name: "a request reports with a part still pending", rule: "1-3", file: "core/round.go",
		old: "r.flags&(rReported|rWaiting) != 0 || r.pending > 0 ||", new: "r.flags&(rReported|rWaiting) != 0 ||"},
	{name: "a report does not hand the blocks back", rule: "ownership", file: "core/round.go",
		old: "\t\t\tp.owner[b] = OwnerEngine\n", new: "\n"},
	{name: "a failed read notifies its producer", rule: "4", file: "core/round.go",
		old: "\tcase r.failed != nil:\n", new: "\tcase r.failed != nil:\n\t\tc.notifyProducer(r)\n"},
	{name: "no fence after a Post whose outcome is unknown", rule: "unknown outcome", file: "core/post.go",
		old: `c.requestFence(c.epoch, Alert{Level: AlertError, Kind: "post_outcome_unknown",`, new: `_ = (Alert{Level: AlertError, Kind: "post_outcome_unknown",`},
	{name: "no fence after a LoadPeers whose outcome is unknown", rule: "unknown outcome", file: "core/peer.go", nth: 1,
		old: `c.requestFence(c.epoch, Alert{Level: AlertError, Kind: "handshake_outcome_unknown",`, new: `_ = (Alert{Level: AlertError, Kind: "handshake_outcome_unknown",`},
	{name: "a hold escalates a tick late", rule: "8", file: "core/hold.go",
		old: "if e.at > c.now {", new: "if e.at >= c.now {"},
	{name: "a written notification after a failure", rule: "4", file: "core/receive.go",
		old: "if r.flags&rWritten != 0 || r.failed != nil {", new: "if r.flags&rWritten != 0 {"},
	{name: "a failed rollback release counted as released", rule: "5", file: "core/journal.go",
		old: "if e != nil && !isNotFound(e, err) {", new: "if false && e != nil && !isNotFound(e, err) {"},
	{name: "a failed Release of a retired peer's dlist counted as released", rule: "6", file: "core/retire.go", nth: 2,
		old: "e != nil && !isNotFound(e, err) {", new: "false && e != nil && !isNotFound(e, err) {"},
}

var found = regexp.MustCompile(`(?m)^\s*explore_test.go:\d+: invariant broken after (\d+) inputs:\n\s*(.*)$`)

func main() {
	run := flag.String("run", "", "only the breaks whose name matches this regexp")
	flag.Parse()
	only := regexp.MustCompile(*run)
	dir, err := os.MkdirTemp("", "explorebreaks-")
	check(err)
	tree := filepath.Join(dir, "tree")
	check(git("worktree", "add", "--detach", tree, "HEAD"))
	missed := report(tree, only)
	// Not deferred: os.Exit skips deferred calls.
	check(git("worktree", "remove", "--force", tree))
	check(os.RemoveAll(dir))
	if missed > 0 {
		fmt.Fprintf(os.Stderr, "explorebreaks: %d breaks not found\n", missed)
		os.Exit(1)
	}
}

// report makes each break in tree in turn, prints its row and returns how
// many were not found.
func report(tree string, only *regexp.Regexp) int {
	missed := 0
	fmt.Printf("| break | rule | file | found by | inputs |\n|---|---|---|---|---|\n")
	for _, b := range breaks {
		if !only.MatchString(b.name) {
			continue
		}
		path := filepath.Join(tree, b.file)
		orig, err := os.ReadFile(path)
		check(err)
		broken, err := apply(string(orig), b)
		if err != nil {
			fmt.Printf("| %s | %s | %s | **does not apply: %v** | - |\n", b.name, b.rule, b.file, err)
			missed++
			continue
		}
		check(os.WriteFile(path, []byte(broken), 0o644))
		cmd := exec.Command("go", "test", "-count=1", "-run", "^TestExplore$", "-v", "./core")
		cmd.Dir = tree
		out, _ := cmd.CombinedOutput()
		check(os.WriteFile(path, orig, 0o644))
		if m := found.FindSubmatch(out); m != nil {
			fmt.Printf("| %s | %s | %s | %s | %s |\n", b.name, b.rule, b.file, strings.TrimSpace(string(m[2])), m[1])
			continue
		}
		missed++
		why := "not found within the CI bound"
		if !strings.Contains(string(out), "--- PASS: TestExplore") {
			why = "the explorer did not run: " + lastLine(out)
		}
		fmt.Printf("| %s | %s | %s | **%s** | - |\n", b.name, b.rule, b.file, why)
	}
	return missed
}

// apply makes b in src: its old text must occur (nth times, if nth is set).
func apply(src string, b brk) (string, error) {
	n := max(b.nth, 1)
	at := -1
	for i, from := 0, 0; i < n; i++ {
		k := strings.Index(src[from:], b.old)
		if k < 0 {
			return "", fmt.Errorf("%q occurs %d times, not %d", b.old, i, n)
		}
		at, from = from+k, from+k+len(b.old)
	}
	if b.nth == 0 && strings.Count(src, b.old) != 1 {
		return "", fmt.Errorf("%q occurs %d times: say which (nth)", b.old, strings.Count(src, b.old))
	}
	return src[:at] + b.new + src[at+len(b.old):], nil
}

func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

func git(args ...string) error {
	if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "explorebreaks:", err)
		os.Exit(2)
	}
}
