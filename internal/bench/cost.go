package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/custody-dev/custody/internal/cluster"
)

// procCost is what processes used so far: time on a CPU and context
// switches (voluntary and not), summed over their threads as /proc counts
// them (schedstat, in nanoseconds; status).
type procCost struct {
	cpu      time.Duration
	switches int64
}

func (c procCost) sub(o procCost) procCost {
	return procCost{cpu: c.cpu - o.cpu, switches: c.switches - o.switches}
}

func (c procCost) add(o procCost) procCost {
	return procCost{cpu: c.cpu + o.cpu, switches: c.switches + o.switches}
}

// treeCost is the cost of pid and every process below it (a host and its
// transport); own is that of pid alone.
func treeCost(pid int) (total, own procCost, err error) {
	own, err = threadsCost(pid)
	if err != nil {
		return procCost{}, procCost{}, err
	}
	total = own
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return procCost{}, procCost{}, err
	}
	for _, t := range tasks {
		kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		if err != nil {
			continue // the thread ended
		}
		for _, k := range strings.Fields(string(kids)) {
			kid, err := strconv.Atoi(k)
			if err != nil {
				return procCost{}, procCost{}, fmt.Errorf("/proc/%d/task/%s/children: %w", pid, t.Name(), err)
			}
			c, _, err := treeCost(kid)
			if err != nil {
				continue // the child ended
			}
			total = total.add(c)
		}
	}
	return total, own, nil
}

// threadsCost sums the cost of pid's live threads.
func threadsCost(pid int) (procCost, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return procCost{}, err
	}
	var c procCost
	for _, t := range tasks {
		dir := fmt.Sprintf("/proc/%d/task/%s/", pid, t.Name())
		sched, err1 := os.ReadFile(dir + "schedstat")
		status, err2 := os.ReadFile(dir + "status")
		if err1 != nil || err2 != nil {
			continue // the thread ended
		}
		var ns int64
		if _, err := fmt.Sscan(string(sched), &ns); err != nil {
			return procCost{}, fmt.Errorf("%sschedstat: %w", dir, err)
		}
		c.cpu += time.Duration(ns)
		for _, line := range strings.Split(string(status), "\n") {
			name, v, ok := strings.Cut(line, ":")
			if !ok || (name != "voluntary_ctxt_switches" && name != "nonvoluntary_ctxt_switches") {
				continue
			}
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return procCost{}, fmt.Errorf("%sstatus: %s: %w", dir, name, err)
			}
			c.switches += n
		}
	}
	return c, nil
}

// hostsCost is the cost so far of the hosts and every process below them
// (their transports), and of the hosts alone.
func hostsCost(hs []*cluster.Host) (total, own procCost, err error) {
	for _, h := range hs {
		t, o, err := treeCost(h.Pid())
		if err != nil {
			return procCost{}, procCost{}, fmt.Errorf("%s: cost: %w", h.Name, err)
		}
		total, own = total.add(t), own.add(o)
	}
	return total, own, nil
}

// benchCost is the cost so far of the hosts with their transports, and of
// this process (the engine side of the bench).
func benchCost(hs []*cluster.Host) (hosts, engine procCost, err error) {
	if hosts, _, err = hostsCost(hs); err != nil {
		return procCost{}, procCost{}, err
	}
	engine, err = threadsCost(os.Getpid())
	return hosts, engine, err
}
