// Package group is the rank group: the custody hosts of one engine's ranks
// (one host per tensor-parallel rank) agreeing over etcd on what each may
// do alone and what they decide together (docs/ranks.md; rules 9-11 of
// docs/guarantees.md, which states the rules cited here by number).
//
// etcd holds, under /custody/engines/<engine>/: each rank's member record
// (its effective mode) under the rank's lease; each rank's terminal
// states, one record per write holding every state of that write (group
// protocol 3), deleted by its writer once every rank's state of each of its
// requests is in or expired (by the lowest live rank once its writer is
// lost); the expiries of requests a rank stopped waiting for, each under a
// lease that ends it should a rank it names never report; and each
// poisoned pool, durably (package ledger, keys.go). Each rank follows the
// engine's keys with one watch and resolves requests from what it saw,
// reading no etcd per round. Peer addresses live under
// /custody/peers/<name>. A group of size 1 has no coordinator and every
// call is a local passthrough.
//
// Every decision of the group (the union, expiry, the collection of
// records, poison, the join's agreement) is package ledger's, a machine
// with no etcd, no clock, no lock and no goroutine: this package feeds it
// the watch's events, runs the transactions it plans, hands it their
// answers, and serialises the calls.
//
// # The host's obligations
//
//  1. Open the group at start, before any transport is built, and Join it
//     with the effective mode the host is about to run (transport, contract
//     major, capabilities, fence scope, pools, escalation). Join returns once
//     every rank agreed, or fails naming the rank and field that differ, the
//     rank that never came, or a rank number held twice. On error, Close and
//     exit: no transport may be built.
//  2. Publish the host's metadata address and compatibility hash once its
//     metadata endpoint listens; Lookup peers by name before connecting.
//  3. Report the requests core finished (Succeeded), failed (Failed) or
//     escalated past the hold cap (TimedOut): each Report is one etcd
//     write of one record, so a host may gather the states of several rounds into one
//     Report while other requests run (a bounded wait; a lone request is
//     reported at once). Then Resolve every request reported and not yet
//     resolved; Resolve again whenever Changed signals (the watch saw
//     another rank's state, or a loss), and Report with no states within
//     a bounded time when Stats says writes are waiting (deletions). Tell the engine about a request only once Resolve returns it
//     Resolved, with the union State: a Failed or TimedOut union fails the
//     request on this rank even where this rank succeeded, and the invalid
//     blocks reported with it are this rank's own.
//  4. When core quarantines a block, Poison its pool; before handing out
//     blocks of a pool, refuse a poisoned one (IsPoisoned) with
//     FailedPrecondition. Status and metrics list Poisoned.
//  5. Watch Changed: on a signal, read LostRanks (their pending requests
//     resolve Failed on the next Resolve) and Err (ErrSessionLost: this rank
//     is no longer a member; fail everything and restart).
//  6. Pass every call a context with a deadline; each etcd call is also
//     bounded by Timeouts.Op. Close last: it revokes the lease and stops
//     every goroutine the group started.
package group
