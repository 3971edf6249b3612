package nixl

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/custody-dev/custody/internal/ucxtls"
	"github.com/custody-dev/custody/sdk"
)

// defaultBackend is the NIXL backend plugin an agent creates when Open
// names none.
const defaultBackend = "UCX"

// defaultTLS is UCX_TLS when neither the tls parameter nor the environment
// names transports: TCP works between any two hosts and reports a dead
// peer.
const defaultTLS = "tcp"

// errModeKey is the UCX backend's parameter for UCX's error handling mode
// ("peer" or "none").
const errModeKey = "ucx_error_handling_mode"

// progressDelayTCP is the progress thread's default wait when no
// shared-memory transport is selected: over tcp the worker's events wake
// the thread at once, so a wait costs no latency and an idle agent no CPU.
// Over posix, sysv and cma see shmProgressDelay.
const progressDelayTCP = time.Millisecond

// shmProgressDelay is the progress thread's default wait over shared
// memory, by the version of the UCX loaded (ok false: unknown). With UCX
// 1.13 a peer's transfers into the agent move only when its progress
// thread runs (UCX raises no event for incoming data there), so it is
// NIXL's own, 0: a thread that spins, a core per agent even when idle.
// With UCX 1.23 (the one NIXL's wheel bundles) a 4 KiB READ from an agent
// whose thread waits 1 ms between rounds takes as long as from a spinning
// one (3.6-4.1 us against 3.5-3.6 us at p50, NIXL direct over posix,sysv),
// and the spinning threads only take the cores from the callers: 1 ms.
// Versions between were not measured and keep the spin.
func shmProgressDelay(major, minor int, ok bool) time.Duration {
	if ok && (major > 1 || major == 1 && minor >= 23) {
		return progressDelayTCP
	}
	return 0
}

// extraBackendKeys are backend parameters NIXL's UCX backend reads but its
// plugin does not list among its parameters (getPluginParams).
var extraBackendKeys = map[string][]string{
	"UCX": {"engine_config"},
}

// config is an agent's parsed Open parameters.
type config struct {
	// backend is the NIXL backend plugin, e.g. UCX.
	backend string
	// tls is UCX_TLS for this process (UCX backend only).
	tls string
	// params are the backend parameters passed to createBackend.
	params map[string]string
	// progressDelay is how long NIXL's progress thread waits for the
	// worker's events between two rounds (nixlAgentConfig pthrDelay);
	// delaySet says the parameter set it, else over shared memory the UCX
	// loaded decides (config.delay).
	progressDelay time.Duration
	delaySet      bool
	// errNone is whether UCX endpoints run without peer error handling
	// (ucx_error_handling_mode=none): UCX then reports no dead peer, so
	// the agent watches its peers' processes and exits when one dies.
	errNone bool
}

// parseParams reads Open's parameters:
//
//	backend=NAME  the NIXL backend plugin (default UCX)
//	tls=LIST      UCX_TLS of this process (default: $UCX_TLS, else tcp)
//	progress_delay=D  the longest wait of NIXL's progress thread between
//	              rounds (default 1ms; over shared memory shmProgressDelay's)
//	KEY=VALUE     any parameter the backend plugin lists (getPluginParams;
//	              for UCX also engine_config), passed to createBackend
//
// known lists the backend's parameters; it is called once the backend is
// known. Over shared-memory UCX transports ucx_error_handling_mode defaults
// to none, which UCX 1.13 needs there. An unknown key is INVALID_ARGUMENT.
func parseParams(p map[string]string, known func(backend string) ([]string, error)) (config, error) {
	c := config{backend: defaultBackend, tls: envTLS(), params: map[string]string{}}
	if v, ok := p["backend"]; ok {
		if strings.TrimSpace(v) == "" {
			return config{}, sdk.Errorf(sdk.CodeInvalidArgument, "nixl: parameter backend is empty; name a NIXL backend plugin, e.g. backend=UCX")
		}
		c.backend = v
	}
	if v, ok := p["tls"]; ok {
		if strings.TrimSpace(v) == "" {
			return config{}, sdk.Errorf(sdk.CodeInvalidArgument, "nixl: parameter tls is empty; name UCX transports, e.g. tls=tcp or tls=posix,sysv,cma")
		}
		c.tls = v
	}
	if !ucxtls.UsesShm(c.tls) {
		c.progressDelay = progressDelayTCP
	}
	if v, ok := p["progress_delay"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return config{}, sdk.Errorf(sdk.CodeInvalidArgument, "nixl: parameter progress_delay=%q: want a duration of at least 0, e.g. 1ms (0 makes NIXL's progress thread spin)", v)
		}
		c.progressDelay, c.delaySet = d, true
	}
	keys := make([]string, 0, len(p))
	for k := range p {
		if k != "backend" && k != "tls" && k != "progress_delay" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if len(keys) > 0 {
		names, err := known(c.backend)
		if err != nil {
			return config{}, err
		}
		names = append(names, extraBackendKeys[c.backend]...)
		allowed := map[string]bool{}
		for _, n := range names {
			allowed[n] = true
		}
		sort.Strings(names)
		for _, k := range keys {
			if !allowed[k] {
				return config{}, sdk.Errorf(sdk.CodeInvalidArgument, "nixl: unknown parameter %q; known: backend, tls, progress_delay and the %s backend's %s", k, c.backend, strings.Join(names, ", "))
			}
			c.params[k] = p[k]
		}
	}
	if c.backend == "UCX" {
		if _, set := c.params[errModeKey]; !set && ucxtls.UsesShm(c.tls) {
			c.params[errModeKey] = "none"
		}
		c.errNone = c.params[errModeKey] == "none"
	}
	return c, nil
}

// envTLS is UCX_TLS from the environment, else defaultTLS.
func envTLS() string {
	if v := strings.TrimSpace(os.Getenv("UCX_TLS")); v != "" {
		return v
	}
	return defaultTLS
}

func (c config) String() string {
	return fmt.Sprintf("backend=%s tls=%s params=%v", c.backend, c.tls, c.params)
}
