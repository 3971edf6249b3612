package plugin

import (
	"fmt"
	"os"

	"github.com/custody-dev/custody/sdk"
)

// ExitError is the error of every call to a transport whose process is
// gone. Its code is PLUGIN_SHUTDOWN (errors.Is(err, sdk.ErrPluginShutdown)
// and sdk.CodeOf hold), which is all the host needs: the process was the
// fence. It also says how the process ended, so that a tool speaking to
// the transport's author (the conformance suite) can find it with
// errors.As and report the death itself rather than the host's advice.
type ExitError struct {
	// Method is the call that found the process gone.
	Method string
	// Transport names the process: "transport at PATH (pid N)".
	Transport string
	// State is how the process ended (exit status or signal); nil when it
	// was not known yet.
	State *os.ProcessState
	// Fence, when not nil, is the ring protocol violation for which the
	// host killed the process.
	Fence error
}

// How says how the process ended, for a person: "exit status 3",
// "signal: killed", or "exited" when unknown; for a fenced process, why
// the host killed it.
func (e *ExitError) How() string {
	how := "exited"
	if e.State != nil {
		how = e.State.String()
	}
	if e.Fence != nil {
		how = fmt.Sprintf("was fenced (killed by the host, %s) because its rings broke the protocol: %v", how, e.Fence)
	}
	return how
}

// Error names the call, the process and how it ended, with the host's
// next step.
func (e *ExitError) Error() string { return e.Unwrap().Error() }

// Unwrap is the contract's error: PLUGIN_SHUTDOWN.
func (e *ExitError) Unwrap() error {
	return sdk.Errorf(sdk.CodePluginShutdown, "%s: %s %s; every transfer it initiated has stopped; launch it again under a new epoch", e.Method, e.Transport, e.How())
}
