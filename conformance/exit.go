package conformance

import (
	"errors"
	"fmt"
	"slices"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
)

// A transport process that dies during a check fails it, and the author
// must read that it died and how (exit status or signal), not the
// PLUGIN_SHUTDOWN error's advice to the host ("launch it again under a new
// epoch"), nor a cascade of such errors from the teardown.

// authorT is the T every check writes through (env.t): an argument of a
// failure or log line that is the error of a call to a process that is
// gone is replaced by what the author needs to read (died).
type authorT struct{ T }

func (t authorT) Errorf(format string, args ...any) {
	t.T.Helper()
	t.T.Errorf(format, forAuthors(args)...)
}

func (t authorT) Fatalf(format string, args ...any) {
	t.T.Helper()
	t.T.Fatalf(format, forAuthors(args)...)
}

func (t authorT) Logf(format string, args ...any) {
	t.T.Helper()
	t.T.Logf(format, forAuthors(args)...)
}

// forAuthors returns args with each error that says the transport process
// is gone replaced by died's account of it.
func forAuthors(args []any) []any {
	out := args
	for i, arg := range args {
		err, ok := arg.(error)
		if !ok {
			continue
		}
		if msg := died(err); msg != "" {
			if len(out) > 0 && &out[0] == &args[0] {
				out = slices.Clone(args) // the caller's args stay as they were
			}
			out[i] = msg
		}
	}
	return out
}

// died describes, for the transport's author, an error that says the
// transport process is gone: how it ended, when the process wrapper knew
// (*plugin.ExitError). It returns "" for any other error.
func died(err error) string {
	var x *plugin.ExitError
	if errors.As(err, &x) {
		return fmt.Sprintf("the transport process died: %s (%s; %s found it gone)", x.How(), x.Transport, x.Method)
	}
	if errors.Is(err, sdk.ErrPluginShutdown) {
		return fmt.Sprintf("the transport says its process is gone (PLUGIN_SHUTDOWN: %s)", sdk.MessageOf(err))
	}
	return ""
}

// exited returns, once, how the agent's process ended when it is gone
// although the check did not kill it, and "" otherwise: from err (an error
// a call just returned), else from Agent.Exited and one call that finds
// the process gone. From then on the teardown skips the agent.
func (a *agent) exited(err error) string {
	if a.killed || a.dead {
		return ""
	}
	msg := ""
	if err != nil {
		msg = died(err)
	} else if a.ag.Exited != nil {
		select {
		case <-a.ag.Exited:
			ctx, cancel := a.e.callCtx()
			_, err := a.tr.Resources(ctx)
			cancel()
			if msg = died(err); msg == "" {
				msg = fmt.Sprintf("the transport process exited (Resources then answered %v)", err)
			}
		default:
		}
	}
	a.dead = msg != ""
	return msg
}

// reportExit fails the check with the death of agent a's process unless
// it already failed (then the death is only logged: the failure that
// mattered came first). A transport process must not exit while its agent
// is open, unless the check killed it or its own peer died
// (PeerLossProcessExits), which the checks that do so expect.
func (e *env) reportExit(a *agent, msg string) {
	if e.t.Failed() {
		e.t.Logf("agent %q: %s; its teardown was skipped", a.name, msg)
		return
	}
	e.t.Errorf("agent %q: %s during the check; a transport process must not exit while its agent is open; its teardown was skipped", a.name, msg)
}
