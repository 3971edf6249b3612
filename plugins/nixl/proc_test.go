package nixl

import (
	"errors"
	"os/exec"
	"testing"
)

// TestWatchProc: the watch calls dead once the watched process exits, and
// refuses one that is gone already.
func TestWatchProc(t *testing.T) {
	self, err := selfProc()
	if err != nil || !self.alive() {
		t.Fatalf("this process: %+v alive=%v, %v", self, self.alive(), err)
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	start, _, err := procStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	child := procID{Pid: uint32(cmd.Process.Pid), Start: start}
	dead := make(chan struct{})
	w, err := watchProc(child, func() { close(dead) })
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-dead // the test times out if the watch never fires
	w.stop()
	w.wait()
	_ = cmd.Wait()
	if child.alive() {
		t.Errorf("reaped child %+v still alive", child)
	}
	if _, err := watchProc(child, func() { t.Error("dead called for a process gone before the watch") }); !errors.Is(err, errProcGone) {
		t.Errorf("watch of a reaped process: got %v, want errProcGone", err)
	}
	// Another start time is another process, even under a live pid.
	if (procID{Pid: self.Pid, Start: self.Start + 1}).alive() {
		t.Errorf("a pid with another start time counts as alive")
	}
}

// TestWatchStop: a stopped watch never calls dead.
func TestWatchStop(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	start, _, err := procStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	w, err := watchProc(procID{Pid: uint32(cmd.Process.Pid), Start: start}, func() { t.Error("dead called after stop") })
	if err != nil {
		t.Fatal(err)
	}
	w.stop()
	w.wait()
	_ = cmd.Process.Kill()
}
