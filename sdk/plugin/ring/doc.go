// Package ring is the shared-memory rings that carry the hot path of
// custody's transport contract (package sdk) between a host and a
// transport process: Post, Release and SendNotifications from the host,
// and their results, the transport's events, the terminal states of its
// handles and its notifications from the plugin. Everything else crosses
// over gRPC (package plugin), and so does everything when the rings are
// not attached. The rings carry the same contract, never another: every
// answer that comes through them is the one the transport gave.
//
// The host's side is a Client, the plugin's side a Server, named as one
// pair; package plugin runs both, so a transport author writes no code for
// the rings.
//
// # Attaching and detaching
//
//  1. After a successful Open the host creates a file of layout
//     DefaultLayout (CreateFile: mode 0600, in a private 0700 directory
//     under /dev/shm), maps it shared, writes its header, and names it to
//     the plugin in one AttachRings call, asking for release at terminal
//     or not.
//  2. The plugin checks the file (AttachFile: a regular file of this user,
//     mode 0600, of the size its header states, of this Version), maps it
//     and serves it (NewServer). It answers what it serves: events
//     (Server.ForwardsEvents), prompt (Server.Prompt) and release at
//     terminal (Server.ReleasesAtTerminal). A plugin that does not offer
//     rings answers UNIMPLEMENTED, and every call stays on gRPC.
//  3. The host then unlinks the file, so that only the two mappings
//     remain, and serves its side with that answer (NewClient); or unmaps
//     a refused file (Unmap).
//  4. The host's calls go through the Client, which is handed the same
//     call over gRPC for what the rings cannot carry (client_calls.go).
//     The plugin tells the Server of the calls that came over gRPC
//     instead (Server.Posted, Server.Released, Server.Canceled), so that
//     it follows the same handles either way.
//  5. After Close the host detaches (Client.Detach): the plugin stops
//     serving and unmaps. When the process is gone (ClientConfig.Done),
//     or is killed, the Client stops; each side unmaps its own mapping.
//
// # Layout
//
// The mapping is a 4 KiB header (layout.go: magic, Version, sizes, and
// the counters and doorbells, each side's on cache lines of their own)
// followed by two rings, each single producer and single consumer:
//
//   - the submission ring (host -> plugin) carries calls: Post, Release,
//     SendNotifications, Drain (fetch the transport's events or
//     notifications now), Detach;
//   - the completion ring (plugin -> host) carries their results, in the
//     order the calls were submitted, and what the plugin pushes on its
//     own: events, terminal states it polled, notifications, and the
//     reason it stopped serving (a fatal entry).
//
// Each ring is an array of fixed 64-byte entries (entry.go) and an arena
// of bytes for the variable part of each entry (index lists, notification
// bytes, messages; wire.go). A result whose items take more than a
// quarter of the completion arena travels in parts, each entry saying
// which of the call's items it holds; a call whose items take more than
// half the submission arena goes over gRPC instead. Counters are 64-bit
// and only grow:
//
//	tail  the producer's count of entries published; written by the producer
//	head  the consumer's count of entries consumed; written by the consumer
//
// # Queues
//
// The producer writes entry tail%n and its arena bytes, then stores
// tail+1; the consumer loads tail, reads entries head..tail-1, copies each
// one's arena bytes out, and stores head (queue.go). Go's sync/atomic
// operations are sequentially consistent, so a store of tail publishes the
// entry and arena bytes written before it (release), and a load of tail
// makes them visible to the reads after it (acquire); likewise head hands
// slots and arena bytes back to the producer. Arena bytes are allocated in
// entry order from a circular buffer: an entry's bytes are contiguous (the
// producer skips the arena's end when they would wrap), and they are free
// again once the consumer's head has passed that entry. Which bytes are
// free the producer computes from its own private records, never from
// anything the peer wrote.
//
// # Trust
//
// Everything read from the mapping is the peer's word and is checked
// before use: head and tail must stay within one ring of each other, an
// entry's sequence number must equal its index, its kind, counts and arena
// range must make sense, and its arena bytes are copied out before they are
// decoded, so a peer that scribbles over the mapping meanwhile can make a
// decode fail but never read out of bounds. Such a failure is a violation
// of the protocol: the host then fences the transport (ClientConfig.Kill)
// and every pending and later call fails with ClientConfig.Shutdown's
// error naming the violation; the plugin stops serving the rings and says
// why in a fatal entry.
//
// # Sleeping
//
// Each side has a doorbell (doorbell.go): a 32-bit futex word and a
// sleeping flag in the mapping. A side with nothing to do spins a little
// (adapting the spin to how often it pays; spin.go), then sets its
// sleeping flag, loads its word, checks the rings once more and waits on
// the word (FUTEX_WAIT on the shared mapping). A producer that has
// published loads the peer's sleeping flag after its own store and, when
// set, clears it, increments the peer's word and wakes it (FUTEX_WAKE).
// Both sides' store-then-load are sequentially consistent, so either the
// sleeper sees the new entries on its last check, or the waker sees the
// flag; and the kernel's FUTEX_WAIT returns at once if the word moved
// since it was loaded. The waker clears the flag with a compare-and-swap,
// so that of several entries published before the sleeper runs again
// only the first costs a FUTEX_WAKE: the sleeper looks at the rings once
// awake. A side that waits for room in a ring it produces into (the pump,
// when the completion ring is full) says so in its flag, and the
// consumer wakes it when it frees room; freed room wakes no side that
// sleeps for entries, since it tells that side nothing. Nothing spins
// while idle.
//
// # The host's side
//
// A Client's calls (client_calls.go) wait for their results within the
// call's deadline, and answer from what the completion ring brought:
//
//   - Poll: a handle posted through the rings and not released is in the
//     last terminal state the plugin reported, else IN_PROGRESS (the plugin
//     has not reported it terminal yet: the contract's answer for "cannot
//     tell"). Any other id is asked of the transport over gRPC, so unknown
//     and released ids get the transport's own answer.
//   - Events and Notifications: what the plugin forwarded, in order; when
//     nothing waits, one drain call through the rings asks the transport
//     now and returns its answer, errors included; unless the transport
//     is a Waker (prompt): the plugin then forwards what the transport
//     has as soon as it wakes, and nothing is asked (a drain would cost a
//     round trip through the rings on every round of the host, for
//     nothing). EventsNow, NotificationsNow and ReleaseNow answer from
//     what the rings brought without ever waiting on the plugin
//     (client_now.go).
//
// Whoever waits drains the completion ring itself; a reader goroutine
// drains it when nobody does (client_drain.go). A caller spins for its
// result only when its call found the pump awake, or when it polls in a
// loop; one whose call had to wake the pump waits, since the pump answers
// only once the kernel runs it again, and the reader hands it the answer.
// Every completion that may change a handle's state or brings a
// notification sends on ClientConfig.Wake.
//
// # The plugin's side
//
// A Server's pump (server_pump.go) takes submissions in order, calls the
// transport, pushes the results, and pushes what changed: the transport's
// events when it is an EventSource that claims them in Describe, else the
// terminal states it finds by polling the handles posted and not yet
// terminal; and the notifications it drains, so that the host's Waker
// covers them (server_push.go).
//
// # Release at terminal
//
// When the host asks for it and the plugin takes it, the plugin releases
// each handle it follows as soon as it finds the handle terminal, before
// the state goes out, and each event and state it pushes carries one more
// byte, 1 when it released the handle. The host answers its own Release of
// such a handle from that record, without crossing to the process, and
// its Cancel of such a handle as the transport would for a terminal one
// (OK); a handle whose release failed in the plugin (byte 0) is released
// through the rings as before. A terminal state is final, so releasing at
// once frees nothing that may still be touched, and the host still holds
// the handle's blocks until its own Release returns. It saves one round
// trip between the processes per transfer. A plugin that says released
// for a handle it reports not terminal, or a byte other than 0 or 1,
// breaks the protocol. A Post that returns the id of a handle the host
// still holds (released or not) breaks the contract, and the host fences:
// the record of the old handle would answer for the new transfer.
package ring
