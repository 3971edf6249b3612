// Package kit is optional help for transport authors: the bookkeeping the
// contract (package sdk, docs/contract.md) asks of every transport,
// written once, the way database/sql/driver authors lean on shared
// pieces. It imports sdk only; no gRPC.
//
// It has two layers; use the one that fits.
//
// Transport wraps a Backend: the author writes only native work (map and
// register a region, load and unload a peer, start a transfer and report
// its end, send a notification) and gets sdk.Transport, sdk.EventSource
// and sdk.Waker. Its calls run one at a time under one lock; the backend
// reports completions and received notifications through a Reporter from
// any goroutine. examples/memcopy is a whole transport built this way.
//
// Book is the bookkeeping alone, for a transport with a concurrency model
// of its own (a simulator whose engine shares its lock, a native library
// driven from one thread). The transport serialises every call to it and
// passes callbacks for the native work. The fake (plugins/fake) and UCX
// (plugins/ucx, whose Post starts a whole batch in one native call:
// CheckPost, then AddHandle for each post that started) are built this
// way; R, P, D and H are its values for a region, a peer, a dlist and a
// handle.
//
// # What the kit guarantees
//
//   - Ids: one process-wide counter for every kind, never zero, never
//     reused (NewID), so a transport cannot hand out an id twice.
//   - Tables of regions, peers, dlists and handles: an unknown or freed id
//     is NOT_FOUND when freed, polled or canceled, INVALID_ARGUMENT when a
//     dlist or post names it.
//   - Pins: a dlist pins each region it uses (local) or its peer (remote);
//     a handle pins both its dlists until it is released, terminal or not.
//     Freeing a pinned resource is BUSY and changes nothing.
//   - Handles: IN_PROGRESS at Post, then DONE, FAILED or CANCELED exactly
//     once (Complete); Release is BUSY unless terminal; Cancel frees
//     nothing and asks the backend to stop only a running handle.
//   - Events: one per handle, when it turns terminal, each drained once.
//     Notifications: each received message drained once, in arrival order.
//   - The gate: every call but Describe, Open, Close and Resources is
//     INVALID_ARGUMENT before Open and after Close (Resources then counts
//     nothing); Open once with a non-empty name; Close is BUSY while
//     anything is held, and OK without effect once closed.
//   - Limits from Describe: a batch over MaxItemsPerCall is an error of
//     the whole call (no item takes effect); empty dlists, empty or
//     unequal index lists, zero-length or out-of-region descriptors, an
//     index outside its dlist, an empty peer name, a notification or
//     metadata over its limit are INVALID_ARGUMENT for the item.
//   - Resources counts every unreleased region, peer, dlist and handle,
//     and as InFlight every posted transfer the backend has not reported
//     ended (sdk.Resources defines it): for a transport that keeps the
//     contract, the live handles not yet terminal.
//
// Every refused or failed item changes nothing: a callback's error is the
// item's error, and the Book records a change only after its callback
// succeeded.
//
// # Breaking the rules on purpose
//
// Misbehave lets a simulator break two rules the Book enforces (release a
// running handle; hand out a used handle id), so that the conformance
// suite can prove it catches each. A transport that means to be correct
// never sets it.
package kit
