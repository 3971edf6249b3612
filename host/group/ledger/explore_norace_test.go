//go:build !race

package ledger

// raceEnabled: the race detector is on (explore_race_test.go).
const raceEnabled = false
