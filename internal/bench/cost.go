package bench

import (
	"fmt"

	"github.com/custody-dev/custody/internal/cluster"
	"github.com/custody-dev/custody/internal/proccost"
)

// hostsCost is what the hosts and every process below them (their
// transports) used so far, and the hosts alone (no system calls: those
// are counted over a window, by a proccost.Meter).
func hostsCost(hs []*cluster.Host) (total, own proccost.Cost, err error) {
	for _, h := range hs {
		pids, err := proccost.Tree(h.Pid())
		if err != nil {
			return total, own, fmt.Errorf("%s: %w", h.Name, err)
		}
		for i, pid := range pids {
			c, err := proccost.Threads(pid)
			if err != nil {
				if i > 0 {
					continue // a transport ended
				}
				return total, own, fmt.Errorf("%s: %w", h.Name, err)
			}
			total = total.Add(c)
			if i == 0 {
				own = own.Add(c)
			}
		}
	}
	return total, own, nil
}
