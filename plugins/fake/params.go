package fake

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// Fence values of the fence parameter.
const (
	fenceIncoming  = "incoming"
	fenceInitiated = "initiated"
)

// Cancel values of the cancel parameter.
const (
	cancelStops = "stops"
	cancelNone  = "none"
)

// params are an agent's settings, parsed from sdk.OpenRequest.Params.
type params struct {
	seed       uint64
	chunk      int
	chunkDelay time.Duration
	fence      string
	cancel     string
	dir        string
	peerDirs   []string // nil: defaultPeerDirs(dir)
	faults     []rule
	faultLog   string // file each firing of a fault rule is appended to
	misbehave  misbehave
	misbehaveP float64 // the chance misbehave breaks its rule at each occasion
}

// defaultParams are the settings of an agent opened without parameters.
func defaultParams() params {
	return params{seed: 1, chunk: 64 << 10, fence: fenceIncoming, cancel: cancelStops, dir: os.TempDir()}
}

// errUnknownKey is the error of a parameter key the fake does not know.
var errUnknownKey = errors.New("unknown key")

// parseParams parses Open's parameters. An unknown key or malformed value is
// INVALID_ARGUMENT naming the key.
func parseParams(in map[string]string) (params, error) {
	p := defaultParams()
	// misbehave=open-lax ignores unknown keys: set it first.
	lax := false
	if v, ok := in["misbehave"]; ok {
		m, _, _ := parseMisbehave(v)
		lax = m == misbehaveOpenLax
	}
	for k, v := range in {
		err := p.set(k, v)
		if lax && err != nil && errors.Is(err, errUnknownKey) {
			continue
		}
		if err != nil {
			return params{}, sdk.Errorf(sdk.CodeInvalidArgument, "fake: parameter %s=%q: %v", k, v, err)
		}
	}
	if p.misbehave == misbehaveFenceLie {
		p.fence = fenceInitiated // Describe still claims incoming
	}
	if p.peerDirs == nil {
		p.peerDirs = defaultPeerDirs(p.dir)
	}
	return p, nil
}

// set applies one parameter.
func (p *params) set(k, v string) error {
	switch k {
	case "seed":
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return fmt.Errorf("want an unsigned integer")
		}
		p.seed = n
	case "chunk":
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("want a positive number of bytes")
		}
		p.chunk = n
	case "chunk_delay":
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("want a non-negative Go duration such as 1ms")
		}
		p.chunkDelay = d
	case "fence":
		if v != fenceIncoming && v != fenceInitiated {
			return fmt.Errorf("want %q or %q", fenceIncoming, fenceInitiated)
		}
		p.fence = v
	case "cancel":
		if v != cancelStops && v != cancelNone {
			return fmt.Errorf("want %q or %q", cancelStops, cancelNone)
		}
		p.cancel = v
	case "dir":
		st, err := os.Stat(v)
		if err != nil {
			return err
		}
		if !st.IsDir() {
			return fmt.Errorf("not a directory")
		}
		p.dir = v
	case "peer_dirs":
		dirs, err := parsePeerDirs(v)
		if err != nil {
			return err
		}
		p.peerDirs = dirs
	case "fault":
		rules, err := parseRules(v)
		if err != nil {
			return err
		}
		p.faults = rules
	case "fault_log":
		if !filepath.IsAbs(v) {
			return fmt.Errorf("want an absolute file path")
		}
		p.faultLog = v
	case "misbehave":
		m, prob, err := parseMisbehave(v)
		if err != nil {
			return err
		}
		p.misbehave, p.misbehaveP = m, prob
	default:
		return fmt.Errorf("%w; known: seed, chunk, chunk_delay, fence, cancel, dir, peer_dirs, fault, fault_log, misbehave", errUnknownKey)
	}
	return nil
}
