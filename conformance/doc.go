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
// the check written for that rule fails, naming the rule.
//
// # Every rule, every time
//
// A rule that held once is not proven. Every check exercises its rule
// Config.Repeat times (--repeat, default 100), on eight goroutines at once
// (four for transfers that must be in flight), so that a transport
// breaking the rule one time in ten passes with probability 0.9^Repeat
// (2.7e-5 at the default; each check's doc says how its count is made).
// Two exceptions say so in their docs: peer-loss/bounded kills a peer four
// times, each on fresh agents with 16 transfers running (64 cut transfers:
// 1.2e-3), since every kill costs process starts and a loss bound; and a
// refused request of over 4096 items (limits/honoured) is asked 8 times.
// The fake's misbehave=MODE:0.1, and the suite's test wrappers under
// NAME:0.1, break a rule at that rate, and the suite's tests show each
// caught. A Release that waits for its transfer is told from a stalled
// one only by count (at least 5, and one in twenty, at one size); a Post
// that waits only when it does so for half the Posts (20 per size), since
// out of process a loaded machine stalls Post's answer while the
// transport moves the bytes as often as one time in four.
// A mode given at construction (the fake's WithMisbehave, or
// CUSTODY_FAKE_MISBEHAVE for its plugin binary) breaks the rules about
// calls before Open, which Open's parameters come too late for.
// Terminal states are polled again, at once and after 250 ms
// (contract/terminal-stays, cancel/terminal-unchanged), of the transport
// itself: out of process past the rings, which answer a terminal handle's
// Poll from their record (Agent.PollTransport). DONE is held to landed
// bytes read the instant it is seen, at every size
// (data/done-means-landed).
//
// Checks that need a transfer still in flight (Release of a running
// handle, Cancel's effect and bound, Post that never waits, frees refused
// while in use, peer loss) measure the transport's bandwidth and size
// their transfers from it, doubling up to the cap (64 MiB, or
// Limits.MaxTransferBytes when smaller; 32 MiB for peer loss's 16 at once)
// until enough stayed in flight, so that a fast NIC is held to them as
// thoroughly as the fake; they skip, saying so, only when even the cap was
// over before the suite could act. Whether a transfer was in flight is
// told by its destination bytes, never by the transport's answer: a
// peer-loss round in which every transfer had landed before the kill does
// not count, and one that cut none up to the cap is a skip, never a pass.
//
// A notification that must arrive is waited for 50 times the latency the
// suite measured for one (between 2 s and 15 s), and one that did not is
// named, by sender and payload.
//
// # Scale
//
// The data checks move up to 64 MiB per transfer (two regions of about
// 80 MiB per check in Config.Dir, /dev/shm by default; a check growing
// in-flight transfers to the cap uses 64 MiB and four 64 MiB slots; a
// peer-loss round at its cap two regions of 288 MiB, freed before the
// next), and contract/ids-never-reused
// posts 100,000 transfers in batches of up to 1024 (Limits.MaxItemsPerCall
// when smaller), so the whole suite takes seconds against the fake.
package conformance
