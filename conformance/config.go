package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/custody-dev/custody/sdk"
	pluginagent "github.com/custody-dev/custody/sdk/plugin/agent"
)

// Agent is one fresh transport a Factory started, not yet opened: the suite
// opens it with Config.Params and closes it in the check's cleanup.
type Agent struct {
	// Transport is the agent under test.
	Transport sdk.Transport
	// Kill ends the agent's process at once, as a crash would, so that the
	// peer-loss checks can observe what its peers see. Nil when the agent
	// cannot die alone (an in-process transport): those checks are skipped.
	Kill func() error
	// Exited is closed once the agent's process has exited. Nil when the
	// factory cannot tell; a transport claiming PeerLossProcessExits then
	// fails the peer-loss check, which cannot verify its claim.
	Exited <-chan struct{}
	// Stop ends what the factory started. The suite calls it once, after
	// Close (or after Kill). Nil when there is nothing to end.
	Stop func()
	// PollTransport, when set, is Poll asked of the transport itself, past
	// whatever answers Transport's Poll on the caller's side (a plugin's
	// rings answer a terminal handle's Poll from the state the plugin first
	// reported). The re-checks of terminal states use it, so that a state
	// that changes later is seen. Nil: Transport.Poll is the transport's
	// word.
	PollTransport func(ctx context.Context, ids []sdk.HandleID) ([]sdk.HandleStatus, error)
}

// Factory starts one fresh agent. Every check starts its own agents (two or
// three, so that remote operations are real), so a factory must be able to
// start many, one after another and at the same time.
type Factory func(ctx context.Context) (Agent, error)

// Config says what to test and how.
type Config struct {
	// New starts the agents under test. Required.
	New Factory
	// Params are passed to every agent's Open (a fake's faults, UCX's tls).
	Params map[string]string
	// Dir is where the suite creates its region files; each check uses a
	// fresh directory below it and removes it. Default: /dev/shm when it
	// exists, else os.TempDir().
	Dir string
	// CheckTimeout bounds one check, cleanup included (default 3 minutes).
	// A check still running then fails; the CLI abandons it and goes on.
	CheckTimeout time.Duration
	// Repeat is how many times a check exercises its rule, spread over
	// concurrent goroutines (default 100). A transport that breaks a rule
	// one time in ten passes a check that exercises it Repeat times with
	// probability 0.9^Repeat: 2.7e-5 at the default, 0.0012 at 64.
	Repeat int
	// Match selects the checks to run by full name (group/name). Nil runs
	// all.
	Match func(name string) bool
}

const (
	defaultCheckTimeout = 3 * time.Minute
	defaultRepeat       = 100
)

// withDefaults returns cfg with its zero fields filled in, or an error
// naming the field that is wrong.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.New == nil {
		return cfg, errors.New("conformance: Config.New is nil: give a Factory that starts a fresh agent")
	}
	if cfg.Dir == "" {
		cfg.Dir = pluginagent.Dir()
	}
	if fi, err := os.Stat(cfg.Dir); err != nil || !fi.IsDir() {
		return cfg, fmt.Errorf("conformance: Config.Dir %q is not a directory (%v): give a writable directory for region files", cfg.Dir, err)
	}
	switch {
	case cfg.Repeat < 0:
		return cfg, fmt.Errorf("conformance: Config.Repeat %d is negative: give how many times each check exercises its rule (0: the default, %d)", cfg.Repeat, defaultRepeat)
	case cfg.Repeat == 0:
		cfg.Repeat = defaultRepeat
	}
	if cfg.CheckTimeout <= 0 {
		cfg.CheckTimeout = defaultCheckTimeout
	}
	return cfg, nil
}
