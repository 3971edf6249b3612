package testbin

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// StatusKiB is a field of /proc/pid/status counted in kB (VmSize, VmRSS).
func StatusKiB(pid int, field string) (uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}
