package proccost

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Cost is what a process used: time on a CPU, context switches (voluntary
// and not) and system calls.
type Cost struct {
	CPU      time.Duration `json:"cpu"`
	Switches int64         `json:"switches"`
	Syscalls int64         `json:"syscalls"`
}

// Sub is c less o.
func (c Cost) Sub(o Cost) Cost {
	return Cost{CPU: c.CPU - o.CPU, Switches: c.Switches - o.Switches, Syscalls: c.Syscalls - o.Syscalls}
}

// Add is c and o together.
func (c Cost) Add(o Cost) Cost {
	return Cost{CPU: c.CPU + o.CPU, Switches: c.Switches + o.Switches, Syscalls: c.Syscalls + o.Syscalls}
}

// Threads is what pid used so far: its CPU time (its process CPU clock:
// every thread's, ended ones included) and the context switches of its
// live threads (/proc/PID/task/*/status); Syscalls is zero.
//
// The kernel brings a running thread's CPU time up to date at each
// scheduler tick, and at once only for a thread of the calling process: a
// window over another process that spins is off by up to a tick per
// running thread.
func Threads(pid int) (Cost, error) {
	var ts unix.Timespec
	// clock_getcpuclockid(3): the process CPU-time clock of pid.
	if err := unix.ClockGettime(int32(^pid<<3|2), &ts); err != nil {
		return Cost{}, fmt.Errorf("the CPU clock of process %d: %w", pid, err)
	}
	c := Cost{CPU: time.Duration(ts.Nano())}
	tids, err := tasks(pid)
	if err != nil {
		return Cost{}, err
	}
	for _, tid := range tids {
		dir := fmt.Sprintf("/proc/%d/task/%d/", pid, tid)
		status, err := os.ReadFile(dir + "status")
		if err != nil {
			continue // the thread ended
		}
		for line := range strings.SplitSeq(string(status), "\n") {
			name, v, ok := strings.Cut(line, ":")
			if !ok || (name != "voluntary_ctxt_switches" && name != "nonvoluntary_ctxt_switches") {
				continue
			}
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return Cost{}, fmt.Errorf("%sstatus: %s: %w", dir, name, err)
			}
			c.Switches += n
		}
	}
	return c, nil
}

// Tree is the pids of pid and every process below it, pid first.
func Tree(pid int) ([]int, error) {
	out := []int{pid}
	kids, err := Children(pid)
	if err != nil {
		return nil, err
	}
	for _, k := range kids {
		sub, err := Tree(k)
		if err != nil {
			continue // the child ended
		}
		out = append(out, sub...)
	}
	return out, nil
}

// Children is the pids of pid's live child processes.
func Children(pid int) ([]int, error) {
	tids, err := tasks(pid)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, tid := range tids {
		path := fmt.Sprintf("/proc/%d/task/%d/children", pid, tid)
		kids, err := os.ReadFile(path)
		if err != nil {
			continue // the thread ended
		}
		for k := range strings.FieldsSeq(string(kids)) {
			kid, err := strconv.Atoi(k)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			out = append(out, kid)
		}
	}
	return out, nil
}

// tasks is the thread ids of pid.
func tasks(pid int) ([]int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out, nil
}
