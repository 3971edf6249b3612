// Package conformance is the suite every custody transport must pass: one
// set of checks that holds a transport to the contract (package sdk, and
// docs/contract.md for the overview; docs/fencing.md for the fence checks),
// run by go test against the fake and the example transport
// (examples/memcopy), and by `custody conformance --plugin PATH` against any
// transport binary built with plugin.Serve.
//
// # Use
//
// Under go test, give Run a Config whose Factory starts a fresh, unopened
// agent each time it is called:
//
//	func TestMyTransport(t *testing.T) {
//		conformance.Run(t, conformance.Config{
//			New: conformance.PluginFactory("bin/custody-transport-x", plugin.LaunchOptions{}),
//		})
//	}
//
// examples/memcopy/conformance_test.go runs the suite both ways: against
// in-process agents, and against the plugin binary (one process per agent,
// so that the peer-loss and fence checks can kill one).
//
// Outside go test, Execute runs the same checks with its own runner and
// returns a Report, which writes a table per capability, JUnit XML and
// JSON.
//
// # What a check may assume, and what it guarantees
//
// Each check is a subtest named group/name, where the group is the
// capability it tests (contract, data, cancel, notifications, peer-loss,
// fence, limits, events). A check runs on fresh agents (two or more when the
// transport claims Remote, so that remote operations are real; one agent
// and itself when it claims only Local), opened with Config.Params, with
// fresh region files in a directory of its own. Every id it creates is
// tracked; when it ends, however it ends, the tracker cancels and settles
// its handles, releases them, its dlists, peers and regions in that order,
// checks that the agent's Resources are zero, closes the agent and stops
// it. An agent whose process died during the check (and the check did not
// kill it) fails the check with how it ended, exit status or signal
// (plugin.ExitError), and its teardown is skipped: every call to it would
// only fail again. What a transport does not claim in Describe is skipped
// with the reason, never passed. Every wait is bounded; a transport that hangs fails
// the check that waited, naming what it waited for.
//
// The checks are listed by Checks; each one's doc is in its Result. The
// suite proves it can fail: its tests run the fake in each of its
// misbehave modes, and wrapped to break each other rule, and assert that
// the check written for that rule fails.
//
// # Scale
//
// The data checks move up to 64 MiB per transfer (two 64 MiB regions per
// check in Config.Dir, /dev/shm by default), and contract/ids-never-reused
// posts 100,000 transfers in batches of up to 1024 (Limits.MaxItemsPerCall
// when smaller), so the whole suite takes seconds against the fake.
package conformance
