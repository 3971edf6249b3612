package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/custody-dev/custody/internal/drive"
	"github.com/custody-dev/custody/sdk"
)

// nixlRef is the NIXL-direct reference program: bin, with args before its
// own (a Python script run by its interpreter).
type nixlRef struct {
	bin  string
	args []string
}

// String names the reference as its output should.
func (r nixlRef) String() string { return strings.Join(append([]string{r.bin}, r.args...), " ") }

// check says why the reference cannot run, naming what is missing.
func (r nixlRef) check() error {
	for _, p := range append([]string{r.bin}, r.args...) {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("NIXL-direct reference %s: %w; make test-nixl builds custody-nixl-reference next to the plugin (NIXL from the package registries, or NIXL_PREFIX), and make test-python makes the Python one's .venv (NIXL's wheel)", r, err)
		}
	}
	return nil
}

// run runs the NIXL-direct reference once and returns the numbers of its
// result line.
func (r nixlRef) run(ctx context.Context, params map[string]string, mode string, size int, op sdk.Op, depth int, minTime time.Duration) (map[string]float64, error) {
	args := append(slices.Clone(r.args), mode, "-size", strconv.Itoa(size), "-op", strings.ToLower(op.String()), "-depth", strconv.Itoa(depth), "-min-time", minTime.String())
	for k, v := range params {
		args = append(args, "-param", k+"="+v)
	}
	out, err := exec.CommandContext(ctx, r.bin, args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("NIXL-direct reference %s %v: %v: %s", r.bin, args, err, drive.LastLine(out))
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
