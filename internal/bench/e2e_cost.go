package bench

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/custody-dev/custody/internal/cluster"
	"github.com/custody-dev/custody/internal/drive"
	"github.com/custody-dev/custody/internal/proccost"
)

// costRow is one kind of process of a measurement and its pids; cost is
// what they used over the window, all together.
type costRow struct {
	name string
	pids []int
	cost proccost.Cost
}

// costRows is what the processes of a measurement used over one window.
type costRows struct {
	rows []costRow
	// syscallsErr says why no system call was counted; nil when they
	// were.
	syscallsErr error
}

// pullRows is the processes of a pull: this process (the engine side),
// then per host the host and the processes below it (its transport).
func pullRows(hs ...*cluster.Host) ([]costRow, error) {
	rows := []costRow{{name: "engine side (this process)", pids: []int{os.Getpid()}}}
	for _, h := range hs {
		tree, err := proccost.Tree(h.Pid())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", h.Name, err)
		}
		rows = append(rows, costRow{name: h.Name + " host", pids: tree[:1]}, costRow{name: h.Name + " transport", pids: tree[1:]})
	}
	return rows, nil
}

// costOf runs f with a proccost.Meter over rows' processes.
func costOf(rows []costRow, f func() error) (costRows, error) {
	var pids []int
	for _, r := range rows {
		pids = append(pids, r.pids...)
	}
	m, err := proccost.Start(pids...)
	if err != nil {
		return costRows{}, err
	}
	if err := f(); err != nil {
		_, _ = m.Stop()
		return costRows{}, err
	}
	costs, err := m.Stop()
	if err != nil {
		return costRows{}, err
	}
	out := costRows{rows: rows, syscallsErr: m.SyscallsErr}
	for i := range out.rows {
		for range out.rows[i].pids {
			out.rows[i].cost = out.rows[i].cost.Add(costs[0])
			costs = costs[1:]
		}
	}
	return out, nil
}

// total is every row's cost together.
func (c costRows) total() proccost.Cost {
	var t proccost.Cost
	for _, r := range c.rows {
		t = t.Add(r.cost)
	}
	return t
}

// perOp is a cost divided among n operations.
type perOp struct {
	cpu                time.Duration
	syscalls, switches float64
}

func per(c proccost.Cost, n int) perOp {
	return perOp{cpu: c.CPU / time.Duration(n), syscalls: float64(c.Syscalls) / float64(n), switches: float64(c.Switches) / float64(n)}
}

// print writes one line per row and one for all of them, each per one of
// n operations.
func (c costRows) print(out io.Writer, title string, n int) {
	fmt.Fprintf(out, "%-34s %10s %9s %9s\n", title, "CPU", "syscalls", "switches")
	for _, r := range c.rows {
		printCostLine(out, r.name, per(r.cost, n))
	}
	printCostLine(out, "all", per(c.total(), n))
}

// printCostLine writes one row of a cost table.
func printCostLine(out io.Writer, name string, p perOp) {
	fmt.Fprintf(out, "  %-32s %10s %9.1f %9.1f\n", name, us(p.cpu), p.syscalls, p.switches)
}

// printPullCosts prints what each kind of process used per sequential pull
// (pulls of them in pull), per bare gRPC round trip (calls of them in rtt)
// and per in-process transfer, and the goals: a pull, summed over every
// process, costs at most twice two bare round trips (a pull's four
// messages across processes, each at most one message of the reference,
// with a factor of two to spare) and the in-process transfer, in CPU; in
// system calls at most twice those of two bare round trips.
func printPullCosts(out io.Writer, pull costRows, pulls int, rtt costRows, calls int, inproc drive.PullResult) {
	fmt.Fprintln(out, "cost: each process's CPU clock, its live threads' context switches (/proc), and its system calls (the raw_syscalls:sys_enter tracepoint, counted by perf events on every thread); spinning included")
	pull.print(out, "cost per sequential pull", pulls)
	rtt.print(out, "cost per bare gRPC round trip", calls)
	in := per(inproc.Cost, max(len(inproc.Pulls), 1))
	printCostLine(out, "in-process transfer (Post→DONE)", in)
	p, r := per(pull.total(), pulls), per(rtt.total(), calls)
	fmt.Fprintf(out, "goal name=e2e-pull-cpu value=%s target=%s met=%s\n", us(p.cpu), us(4*r.cpu+in.cpu), yesNo(p.cpu <= 4*r.cpu+in.cpu))
	for _, err := range []error{pull.syscallsErr, rtt.syscallsErr} {
		if err != nil {
			fmt.Fprintf(out, "system calls not counted: %v\n", err)
			return
		}
	}
	if inproc.SyscallsErr != "" {
		fmt.Fprintf(out, "system calls of the in-process transfer not counted: %s\n", inproc.SyscallsErr)
	}
	fmt.Fprintf(out, "goal name=e2e-pull-syscalls value=%.1f target=%.1f met=%s\n", p.syscalls, 4*r.syscalls, yesNo(p.syscalls <= 4*r.syscalls))
}
