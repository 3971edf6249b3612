package ucx

import "time"

// ThreadStats reports the agent's progress-thread rounds and sleeps so far
// (tests).
func (t *Transport) ThreadStats() (rounds, sleeps uint64) {
	return t.agent.Load().nw.threadStats()
}

// FailMsgAllocs makes the agent's next n copies of received notifications
// fail as if memory ran out (tests).
func (t *Transport) FailMsgAllocs(n int) { t.agent.Load().nw.failMsgAllocs(n) }

// Sleeping reports whether the agent's progress thread sleeps now (tests).
func (t *Transport) Sleeping() bool { return t.agent.Load().nw.sleeping() }

// SetSleepMax sets how long progress threads of agents opened from now on
// sleep at most, and returns a function that restores the previous bound
// (tests: with an hour, a wake-up that never comes shows as a hang).
func SetSleepMax(d time.Duration) (restore func()) {
	old := sleepMax
	sleepMax = d
	return func() { sleepMax = old }
}

// UCXVersion is ucxVersion, for the tests.
var UCXVersion = ucxVersion

// FenceScope is fenceScope, for the tests.
var FenceScope = fenceScope

// PauseProgress stops (or resumes) the agent's progress thread, so that
// only what callers progress themselves moves (tests).
func (t *Transport) PauseProgress(on bool) { t.agent.Load().nw.pauseThread(on) }

// SetProgressHook makes the progress of a caller of Events or Poll run fn in place
// of the shim's progress, where and when that would run (tests); nil
// restores it. Set it while no call runs.
func (t *Transport) SetProgressHook(fn func()) { t.agent.Load().progressHook = fn }
