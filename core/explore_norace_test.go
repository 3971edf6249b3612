//go:build !race

package core

// raceEnabled: the race detector is on (explore_race_test.go).
const raceEnabled = false
