package bench

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/custody-dev/custody/internal/drive"
	"github.com/custody-dev/custody/sdk"
)

// nixlReference runs the NIXL-direct reference once and returns the
// numbers of its result line.
func nixlReference(ctx context.Context, bin string, params map[string]string, mode string, size int, op sdk.Op, depth int, minTime time.Duration) (map[string]float64, error) {
	args := []string{mode, "-size", strconv.Itoa(size), "-op", strings.ToLower(op.String()), "-depth", strconv.Itoa(depth), "-min-time", minTime.String()}
	for k, v := range params {
		args = append(args, "-param", k+"="+v)
	}
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("NIXL-direct reference %s %v: %v: %s", bin, args, err, drive.LastLine(out))
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "reference" {
			continue
		}
		vals := map[string]float64{}
		for _, kv := range f[1:] {
			if k, v, ok := strings.Cut(kv, "="); ok {
				if x, err := strconv.ParseFloat(v, 64); err == nil {
					vals[k] = x
				}
			}
		}
		return vals, nil
	}
	return nil, fmt.Errorf("NIXL-direct reference printed no result line: %s", drive.LastLine(out))
}
