//go:build race

package core

// raceEnabled: the race detector is on, which slows the explorer tenfold:
// TestExplore searches shallowly then.
const raceEnabled = true
