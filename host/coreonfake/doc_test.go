// Package coreonfake runs core's rules over the real in-process fake
// transport (plugins/fake): agents that really map memory, move bytes on a
// DMA goroutine of their own and deliver notifications over sockets, in
// real time. It exists for what core's own tests cannot show: core's tests
// use the scripted double only (core/double_test.go), which answers every
// call at once, with no goroutine and no clock, so that each result is the
// same on every run. The cases here are the ones where the real fake gives
// something the double does not: bytes that land in a pool, notifications
// that travel between agents in order, a second Core really writing into
// this one's memory, and the ownership property test, whose random faults
// and timing come from the fake. They drive core through its exported API
// only, as a host does (drive_test.go plays the host's part), with wall-clock
// bounds on every wait.
//
// The package has test files only.
package coreonfake

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
