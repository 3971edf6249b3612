package demo

import (
	"errors"
	"fmt"
)

// Options configure a demo run. Zero values mean the defaults.
type Options struct {
	// Custody is the custody binary to run hosts with (required).
	Custody string
	// Transport is "fake" (default), "ucx" or "nixl" (custody-transport-NAME
	// next to the custody binary).
	Transport string
	// Params are extra transport parameters for both hosts.
	Params map[string]string
	// Requests to run (default 160), Concurrency of them at once (default 8).
	Requests, Concurrency int
	// BlockSize in bytes (default 64 KiB).
	BlockSize int
	// Seed makes the request mix and the faults replay (default 1).
	Seed uint64
	// UnsafeEagerRelease is the negative control: the decode host releases
	// handles after a few milliseconds and hands their blocks back for reuse,
	// whether or not their transfers finished.
	UnsafeEagerRelease bool
	// Dir keeps the hosts' configs, logs and pools (default: a temporary
	// directory, removed afterwards).
	Dir string
	// Kills is how many times a transport process is killed from outside
	// (SIGKILL), spread evenly over the run, alternating between the decode
	// and the prefill host. Zero means none for the fake, which crashes by
	// its fault rules, and one per host for other transports.
	Kills int
	// Soak runs long: the fake gets rules of every fault kind that fire
	// all along the run (not once per process), and blocks that passed
	// their check are audited again and freed once Window later requests
	// were checked, so that the pools stay small however many requests run.
	Soak bool
	// Window is how many checked requests keep their blocks for the
	// audit under Soak (default 64).
	Window int
}

func (o *Options) defaults() error {
	if o.Custody == "" {
		return errors.New("demo: the custody binary is required")
	}
	if o.Transport == "" {
		o.Transport = "fake"
	}
	switch o.Transport {
	case "fake", "ucx", "nixl":
	default:
		return fmt.Errorf("demo: transport %q: want fake, ucx or nixl", o.Transport)
	}
	if o.Requests == 0 {
		o.Requests = 160
	}
	if o.Concurrency == 0 {
		o.Concurrency = 8
	}
	if o.BlockSize == 0 {
		o.BlockSize = 64 << 10
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Window == 0 {
		o.Window = 64
	}
	if o.Requests < 0 || o.Concurrency < 0 || o.BlockSize < 0 || o.Kills < 0 || o.Window < 0 {
		return errors.New("demo: requests, concurrency, block size, kills and window must be positive")
	}
	if o.Kills == 0 && o.Transport != "fake" {
		o.Kills = 2 // the fake crashes by its fault rules; others are killed, once each host
	}
	if o.Kills > o.Requests {
		return fmt.Errorf("demo: %d kills for %d requests: at most one kill per request", o.Kills, o.Requests)
	}
	return nil
}
