//go:build race

package ledger

// raceEnabled: the race detector is on, which slows the explorer tenfold
// and finds nothing in it (it runs on one goroutine).
const raceEnabled = true
