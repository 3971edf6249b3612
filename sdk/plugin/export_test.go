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

// CorruptCompletions scribbles over p's completion ring as a broken
// transport would (its tail jumps far ahead) and rings the host. It
// reports false when p has no rings.
func CorruptCompletions(p *Plugin) bool {
	r := p.rings.Load()
	return r != nil && r.Scribble()
}

// RingsEnv is the environment variable that turns a plugin's rings off.
const RingsEnv = ringsEnv
