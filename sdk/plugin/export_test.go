package plugin

import "syscall"

// WithoutDeathSignal starts transports with no parent death signal, so a
// test proves the lifeline alone.
func WithoutDeathSignal() { deathSignal = syscall.Signal(0) }

// WithoutLifeline starts transports with no lifeline, so a test proves the
// parent death signal alone.
func WithoutLifeline() { noLifeline = true }

// EnvLifeline and LifelineExit are the lifeline's variable and exit status.
const (
	EnvLifeline  = envLifeline
	LifelineExit = lifelineExit
)
