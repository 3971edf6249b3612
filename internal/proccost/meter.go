package proccost

import "fmt"

// Meter measures a set of processes over a window, from Start to Stop.
type Meter struct {
	pids   []int
	before []Cost
	sys    []*Syscalls
	// SyscallsErr says why system calls are not counted (every Cost's
	// Syscalls is then zero); nil when they are.
	SyscallsErr error
}

// Start opens a window over pids.
func Start(pids ...int) (*Meter, error) {
	m := &Meter{pids: pids}
	for _, pid := range pids {
		s, err := OpenSyscalls(pid)
		if err != nil {
			m.SyscallsErr = err
			m.closeSyscalls()
			break
		}
		m.sys = append(m.sys, s)
	}
	for _, pid := range pids {
		c, err := Threads(pid)
		if err != nil {
			m.closeSyscalls()
			return nil, fmt.Errorf("process %d: %w", pid, err)
		}
		m.before = append(m.before, c)
	}
	return m, nil
}

// Stop ends the window and returns what each process used in it, in the
// order of Start's pids.
func (m *Meter) Stop() ([]Cost, error) {
	defer m.closeSyscalls()
	out := make([]Cost, len(m.pids))
	for i, pid := range m.pids {
		c, err := Threads(pid)
		if err != nil {
			return nil, fmt.Errorf("process %d: %w", pid, err)
		}
		out[i] = c.Sub(m.before[i])
		if m.sys != nil {
			if out[i].Syscalls, err = m.sys[i].Count(); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// closeSyscalls closes the counters. Closing a perf event fails only for a
// bad descriptor, which these are not.
func (m *Meter) closeSyscalls() {
	for _, s := range m.sys {
		_ = s.Close()
	}
	m.sys = nil
}
