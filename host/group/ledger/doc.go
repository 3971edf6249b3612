// Package ledger is a rank group's decisions as a machine: what one rank
// knows of its group and what it does about it (rules 9-11 of
// docs/guarantees.md). It imports no etcd, takes no lock, reads no clock
// and starts no goroutine (TestLedgerIsPure): like etcd's raft, it takes
// events in and hands out what must be done, and package group does the
// I/O. Tests drive it with the scripts in testdata, no etcd, no timing.
//
// Its inputs are what the watch of the engine's prefix shows (Apply, one
// watch response's events; Progress; Reload, the prefix read whole), this
// rank's own terminal states (Report), the answers to the transactions it
// planned, and time as a value where a record needs it (Poison's at,
// Expire's waited). Its outputs are the transactions to run, as plain data
// (Txn: comparisons, puts, deletes, gets), and the outcomes to report
// (Resolve).
//
// # The caller's obligations
//
//  1. Serialise every call: a Ledger is not safe for concurrent use. Keep
//     a plan whole until its answers are in: between Flush and its last
//     Done, or ExpiryDue and its ExpiryWritten, make no Report, Resolve,
//     Flush or expiry call; the watch's input (Apply, Progress, Reload)
//     may come in between.
//  2. SetLease with the membership lease before the first event; Reload
//     with the prefix read at one revision, then Apply every watch
//     response from the next revision on, in order, whole; Progress on a
//     progress notice; Reload again after a broken watch. Whenever Apply
//     says so, and after every Reload, signal whoever waits on the group.
//  3. Join with the mode the host is about to run, run the transaction it
//     returns and hand its answer to MemberWritten; once JoinReady, Agree.
//  4. Report each round's terminal states, then Flush: run each
//     transaction Next returns, in order, hand each answer to Done, and
//     stop at the first error (etcd's, or Done's). Then Resolve.
//  5. To expire a request: ExpiryDue; if due, run ExpiryTxn under a lease
//     whose TTL is ExpiryTTLFor(waited) and hand the answer to
//     ExpiryWritten; if it was not written, wait until Rev reaches the
//     revision it returned, and ask again. A lease that holds no expiry
//     may be revoked, but not once a transaction under it failed: it may
//     have run, and its expiry goes only with the lease's TTL.
//  6. Poison and ClearPoison: run the transaction each returns.
//
// # The phases of a request
//
// A request's phase is one Phase: pending until every rank's state is in,
// lost or expired; then resolved, returned, and forgotten once no key of
// it is left (phase.go). The states record that carries this rank's state
// is deleted once every request in it is resolved; an orphan record (its
// member gone, or a foreign record under this member's keys) by the rank
// that collects it (collect.go); expiries by the lowest live rank once
// every live rank's state is in, or by their lease (expire.go).
package ledger
