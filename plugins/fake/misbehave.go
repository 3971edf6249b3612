package fake

import "fmt"

// misbehave is a deliberate contract violation, so that the conformance
// suite can prove it catches each one.
type misbehave string

// The misbehaving modes, as named by the misbehave parameter.
const (
	misbehaveNone           misbehave = ""
	misbehaveReleaseRunning misbehave = "release-running"
	misbehaveReuseIDs       misbehave = "reuse-ids"
	misbehaveEarlyDone      misbehave = "early-done"
)

// reuseAfter is how many posts an agent in reuse-ids mode makes before it
// hands out a released handle id again.
const reuseAfter = 64

// parseMisbehave parses the misbehave parameter.
func parseMisbehave(v string) (misbehave, error) {
	switch m := misbehave(v); m {
	case misbehaveNone, misbehaveReleaseRunning, misbehaveReuseIDs, misbehaveEarlyDone:
		return m, nil
	}
	return "", fmt.Errorf("unknown mode; known: %s, %s, %s", misbehaveReleaseRunning, misbehaveReuseIDs, misbehaveEarlyDone)
}
