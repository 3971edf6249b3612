// Package ucx is custody's UCX transport: real bytes between agents over
// TCP or shared memory, through UCP (UCX 1.13, Debian libucx-dev) over
// cgo. It implements sdk.Transport and sdk.EventSource in-process (New)
// and as the plugin binary custody-transport-ucx.
//
// # Model
//
// One agent holds one UCP context and one worker
// (UCS_THREAD_MODE_SERIALIZED) and a progress thread of the C shim's own
// (a pthread, not a goroutine). Every UCX call, from that thread or from a
// caller's, happens under the worker's lock; a caller announces itself
// before it takes the lock, and the progress thread lets it in before its
// next round. Transport calls run on their callers' goroutines under the
// agent's lock; there is no hop to another goroutine or thread per call:
//
//   - Post checks its items and hands them to the shim in one call, as
//     fixed-size submission entries with their variable parts (segments,
//     notification bytes) in side arrays; the shim issues the puts or gets
//     and the flush before Post returns.
//   - The progress thread queues what finished as fixed-size completion
//     entries and bumps a counter; every call first reads that counter
//     (one atomic load) and takes the entries only when it moved.
//   - Poll, when a handle it is asked about still runs and at most 4 ops
//     are in flight, progresses the worker itself, outside the agent's
//     lock (so that no Post or Release waits behind it), until nothing more is
//     ready (at most 64 rounds, stopping early when another call waits for
//     the worker; not while the progress thread holds the lock): a caller that
//     polls until DONE is its own progress engine. While it polls in a
//     loop (it progressed within the last 2 µs), the progress thread naps
//     instead of spinning beside it. With more ops in flight the progress
//     thread drives them alone, and Poll only reads. When nothing was
//     ready, Poll yields the core (sched_yield) before it returns: the
//     transfer then waits for the peer or for this side's progress thread,
//     and a caller polling in a loop would otherwise take their core on a
//     crowded machine.
//   - Events, while anything is in flight, does the same, except that
//     with more than 4 ops in flight it leaves
//     the core to the progress thread without yielding it: the ring pump
//     of a transport process asks for events in a loop and serves
//     submissions between its calls, so it finds a completion without
//     waiting for the progress thread or a wake-up, and a Post (from the
//     gRPC fallback) never waits behind its progress.
//   - Release, Cancel and the rest only touch the agent's own state, or
//     make their UCX call on the caller's thread under the worker's lock.
//
// The transport is an sdk.Waker (waker.go): every change a call could
// see (a completion queued, a notification received or lost, an endpoint
// failed) bumps a counter in the shim, and, when a Go waiter armed
// itself, the shim writes an eventfd once. One goroutine per agent blocks
// on that eventfd in Go's poller and turns each write into a send on
// Wake's channel, so a host or ring pump sleeps until then instead of
// polling, and an idle agent wakes nobody. The goroutine ends at Close.
// It is an sdk.WakeReasoner too: the goroutine tells completions (and
// endpoint failures) from notifications by the shim's own counters, so
// that a ring pump drains notifications only when one came.
//
// The submission and completion entries are laid out as a ring's would
// be (cu_sub, cu_seg and cu_done in shim.h), so that the progress thread
// could take submissions from a shared-memory ring itself, by the same
// cu_submit, instead of from a caller.
//
// The progress thread spins while anything is in flight (ops, notification
// sends, endpoint closes) and for 2 ms after the last event, yielding the
// core after 64 idle rounds in a row (both sides' progress moves the
// bytes, and a peer waiting for our core would otherwise wait for our
// time slice). Then it arms the worker (ucp_worker_arm) and sleeps in poll
// on the worker's event fd (UCP_FEATURE_WAKEUP) and on an eventfd that a
// Post or notification send writes when the thread sleeps, so that it
// spins again while the transfer runs: incoming data, which needs this
// side's progress (see Paths), wakes it, and an idle agent costs no CPU
// but one safety-net wake-up every 100 ms. Completed ops leave the shim
// through the completion queue and are freed there; a request is freed
// only in its completion callback, never while its operation may run.
//
// Regions are files mapped MAP_SHARED and registered with ucp_mem_map over
// the mapping. LocalMetadata carries, versioned and checksummed (at most
// 1 MiB), the agent name, its pid and start time, the worker address and
// each region's id, address, length and packed rkey; anything else is
// INVALID_ARGUMENT and loads nothing. One endpoint per loaded peer. A post
// is one handle: a ucp_put_nbx or ucp_get_nbx per run of descriptor pairs
// contiguous on both sides (one per pair when none are), and for
// WRITEs an endpoint flush (ucp_ep_flush_nbx) issued after the puts of the
// Post call (one per call and peer, covering every put before it), since
// a completed put only frees the source: a handle is DONE only when every
// request it depends on completed, so a WRITE is DONE when its bytes are
// at the destination. A post's notification (PostSpec.Notification, on a
// WRITE or a READ: a consumer's "consumed" rides with its READ) is sent
// (active message, eager) by the shim only after that, with no call from
// the host, and the handle turns DONE once the send completed.
// Notifications are active messages, delivered exactly once, in order per
// sender. A received notification the shim cannot copy (out of memory) is
// counted, and the next Notifications call fails with BACKEND saying how
// many were lost: UCX gives no way to refuse it to the sender (its
// callback must return OK).
//
// The contract's bookkeeping (ids, tables, pins, handle states, events,
// the inbox, the Open/Close gate and the limit checks) is a kit.Book
// (package sdk/kit), the same as the fake's; this package keeps only the
// native values the Book holds for it (a region's mapping and memory
// handle, a peer's endpoint and rkeys, a remote dlist resolved to remote
// addresses and rkeys once, at Prepare, so that Post looks nothing up).
// Release of a running handle, DeregisterMemory of a region an unreleased
// handle's dlist uses (ucp_mem_unmap of memory in flight crashes UCX),
// UnloadPeers of a peer with dlists (a transfer holds its remote dlist),
// and ReleaseDescriptors of a dlist an unreleased handle uses are BUSY;
// Close with anything held, an endpoint still closing or a notification
// still being sent is BUSY. Resources counts as the Book does, and as
// Peers also the endpoints still closing.
//
// # Cancel
//
// UCX cannot cancel a put or a get: ucp_request_cancel acts on tag
// receives only. Cancel is accepted and changes nothing (CancelNone). A
// forced endpoint close (UCP_EP_CLOSE_FLAG_FORCE) would end the local
// requests with UCS_ERR_CANCELED, but it is not offered: it needs peer
// error mode, which the shared-memory configuration cannot use, and over
// tcp a WRITE's data already sent may still be applied by the peer after
// the local close, so CANCELED could not promise that no byte moves any
// more. A host that must stop transfers fences the process instead.
//
// # Peer failure, per configuration
//
// tls=tcp (the default without $UCX_TLS): endpoints use
// UCP_ERR_HANDLING_MODE_PEER. A killed peer's connection resets; UCX calls
// the endpoint's error handler and completes every outstanding request
// with an error, so each handle to it ends FAILED with REMOTE_DISCONNECT,
// in milliseconds here (PeerLossReported, bound 30 s). The bound also
// covers a peer host that vanishes while the connection is idle (UCX's
// TCP keepalive: 10 s, then 2 s probes, kernel count); one that vanishes
// with data unacknowledged is found only by the kernel's retransmission
// timeout, which UCX 1.13 does not bound: there the host's hold cap and
// fence apply. The surviving agent lives on; once the
// host releases the handles and unloads the peer, its counters return to
// zero.
//
// tls=posix,sysv,cma (or any list naming a shared-memory transport): UCX
// 1.13 cannot build an endpoint in peer mode over these (ucp_ep_create:
// "sysv/memory - no peer failure handler, posix/memory - no peer failure
// handler, cma/memory - no am bcopy", UCS_ERR_UNREACHABLE), and adding tcp
// makes UCX carry the RMA over tcp. So endpoints use
// UCP_ERR_HANDLING_MODE_NONE (see Paths for where the bytes go). Measured
// with kill -9 of the peer mid-transfer: UCX reports
// nothing, puts, gets and flushes to it never complete, and a forced close
// is refused (UCS_ERR_INVALID_PARAM), so those requests can never be
// finished or safely freed. The agent therefore watches each loaded peer's
// process itself (pid and start time from its metadata; a pidfd in Go's
// poller, so that watching costs nothing until the process exits) and,
// when one dies while loaded, exits the process (status 4)
// with a message on stderr: the host treats that as a fence
// (PeerLossProcessExits). Never a hang, never a silent success. Peers
// must share the host in this mode, as these transports require anyway.
// UCX 1.22 is the same here: ucx_info -d lists no peer-failure handling
// for posix or sysv (cma has it, but carries no active messages).
//
// Describe before Open reports the configuration Open without a tls
// parameter would get, which is $UCX_TLS when set: run a shared-memory
// agent with UCX_TLS set in its environment so that the host's Describe
// agrees.
//
// # Fence scope, per configuration
//
// Killing the agent's process stops every transfer it initiated, always.
// Whether it also stops transfers peers initiated into or out of its
// memory depends on who copies the bytes (see Paths). The memory is the
// engine's region files, which UCX did not allocate, so no transport can
// map it for a peer: over tcp, a peer's puts and gets arrive as active
// messages, and this agent's progress copies each into or out of the
// region. Once the process is dead, nothing copies: not one byte lands,
// as the conformance check fence/incoming (no tolerance) confirms on every
// run. So tls=tcp (alone, or with self) states FenceScope
// initiated-and-incoming, and a host hands a failed push receive's blocks
// back once it fenced the agent, instead of quarantining them.
//
// Every other configuration states initiated. Over posix,sysv,cma the
// same reasoning holds by Paths (puts and gets go through this agent's
// FIFO and its progress copies them; cma only serves rendezvous this
// agent's own thread pulls), but the suite cannot confirm it: there a
// target's death makes the initiator exit too (PeerLoss process-exits), and
// fence/incoming then fails on the initiator's PLUGIN_SHUTDOWN before it
// compares the target's bytes. RDMA transports, xpmem and knem let a peer
// reach registered memory without this process, and aliases (sm, shm, all)
// or negated lists may select them. The rule is fenceScope (fence.go).
//
// # Paths
//
// Where the bytes go, as UCX 1.13 reports it (UCX_LOG_LEVEL=info: the
// ep_cfg line; UCX_PROTO_ENABLE=y UCX_PROTO_INFO=y: "software emulation")
// and strace confirms (no process_vm_writev). Over tcp, UCP emulates puts
// and gets over active messages (rma_am(tcp)), whatever the memory. Over
// posix,sysv,cma, the put/get lanes are sysv and posix, which reach only
// memory UCX allocated itself (they cannot register: ucx_info -d); cma can
// register region files but does zero-copy only, which UCP uses for
// active-message rendezvous, never for put/get. So our puts and gets are
// emulated over active messages through the peer's sysv FIFO: the sender
// copies in, the peer's progress copies out into the region and
// acknowledges. Two copies and both sides' CPU per byte, where
// ucx_perftest, on UCX-allocated segments, does one memcpy straight into
// the peer's memory. A single-copy path for region files would need the
// peer to pull them with an active-message rendezvous (cma), a different
// protocol; see custody bench for the references. Each emulated put
// moves one posix or sysv FIFO segment per message (UCX_POSIX_SEG_SIZE,
// UCX_SYSV_SEG_SIZE: 8 KiB) and the peer acknowledges each, so larger
// segments move bulk data with fewer messages. Two limits, should anyone
// raise them (in the environment: UCX 1.13 does not apply these prefixed
// names given to ucp_config_modify): a segment above 65535 bytes
// overflows the FIFO element's 16-bit length and corrupts data silently
// (the conformance suite's data checks catch it), and the sender writes
// into the receiver's segments up to its own segment size (UCX 1.13's mm
// transport does not check it), so both peers must use the same value.
//
// # UCX versions
//
// The transport builds, unchanged, against the UCX pkg-config finds
// (Debian's libucx-dev 1.13.1, the default) or the one under UCX_PREFIX:
// make UCX_PREFIX=$(scripts/ucx.sh current) builds and tests it against
// UCX 1.22.0 from the Python package registry (libucx-cu12, the UCX that
// NIXL's wheels run on). Everything above holds on both. On 1.22 every
// test of this package passes, conformance over tcp and over shared memory
// included. There a caller's progress round over posix,sysv,cma copies a
// whole cma segment (UCX_CMA_SEG_SIZE, 512 KiB by default), so one Events
// or Poll moves at most 64 of them (32 MiB): a 16 MiB WRITE can finish
// within one call, a 64 MiB one cannot (TestCallerProgressBounded). On
// 1.13 the caller's rounds move little of a WRITE there.
//
// Over tcp the agent sets UCX's TCP segment sizes to 256 KiB
// (tcpSegments, unless a parameter or the environment sets them): with
// UCX's defaults (8 KiB to send, 64 KiB to receive) 1.22 moves 1 MiB no
// faster than 1.13. With them, custody bench bw at 1 MiB over tcp, in one
// run: 1.22 3,648 to 3,842 MiB/s WRITE and 3,522 to 3,569 READ, against
// 1,014 to 1,091 with UCX's defaults (two rounds each); 1.13 stays at
// about 1,050 with them or without. Over posix,sysv,cma this
// transport is slower on 1.22 (0.85x WRITE, 0.61x READ at 1 MiB, session
// 13), while 1.22's own ucx_perftest is 6x faster into heap memory there
// (one copy). make's default stays 1.13: 1.22 is faster over tcp and in a
// single 4 KiB Post to DONE over shared memory, but slower in streams over
// posix,sysv,cma. custody bench bw, one run, 1.13 then 1.22, MiB/s:
//
//	tls             op     4 KiB (depth 1024)  1 MiB (depth 64)
//	tcp             WRITE  491 / 504           1,042 / 3,282
//	tcp             READ   510 / 529           1,132 / 3,005
//	posix,sysv,cma  WRITE  2,336 / 1,417       6,758 / 5,626
//	posix,sysv,cma  READ   2,108 / 355         7,283 / 4,686
//
// The slow small READs come with cma: over posix,sysv the same 4 KiB run
// gives 1.22 1,814 WRITE and 2,448 READ (1.13: 1,983 and 2,045).
//
// UCX_PREFIX picks 1.22. make test runs this package's tests against both
// (test-ucx-current), and each run checks that it loaded the UCX it was
// built for (TestRunsOnTheUCXItWasBuiltFor).
//
// On 1.22 the shared-memory list chooses between latency and bandwidth:
// with cma, UCP moves the bytes by single copies between the processes
// (process_vm_readv and process_vm_writev, strace), which makes a
// 4 KiB Post to DONE 6.4 µs through the rings (33.7 µs without), while a
// 1 MiB stream is slower with it (custody bench bw, 1.22, two runs of
// three rounds: posix,sysv,cma 4,606 to 4,831 MiB/s WRITE and 4,752 to
// 4,786 READ; posix,sysv 7,622 to 7,712 and 7,812 to 8,675). NIXL direct
// shows the same (3,036 against 7,380 WRITE). On 1.13 cma changes neither
// (5,719 to 7,296 WRITE with it, 6,337 to 7,000 without).
//
// Against NIXL direct on NIXL's wheel (custody bench nixl, whose Python
// reference runs NIXL 1.5.1 and the UCX 1.23.0 it bundles, with its own
// defaults), in one run per line, 1 MiB at depth 64 in MiB/s, and 4 KiB
// Post to DONE p50 through the plugin boundary:
//
//	tls             UCX   ours WRITE  READ   NIXL WRITE  READ   ours 4 KiB  NIXL 4 KiB
//	tcp             1.13  1065        1077   3011        779    109 µs      31 µs
//	tcp             1.22  3838        3571   3116        817    112 µs      32 µs
//	posix,sysv,cma  1.13  7208        8725   3507        3343   33 µs       5.6 µs
//	posix,sysv,cma  1.22  5858        5239   3260        3705   6.4 µs      5.8 µs
//
// (The shared-memory lines were taken before the TCP segment sizes, which
// do not apply there.) With the same 256 KiB segments given to NIXL
// through the environment, over tcp on 1.22: ours 3,791 WRITE and 3,447
// READ, NIXL's 2,682 and 2,244. So on 1.22 this transport moves 1 MiB
// 1.2 to 4.4 times as fast as NIXL over tcp and 1.4 to 1.8 times over
// shared memory (1.13 there: 2.1 to 2.6 times); its 4 KiB Post to DONE through the rings is within 10 %
// of NIXL's own over shared memory (in which each NIXL call is one Python
// call more) and 3.5 times NIXL's over tcp.
//
// # Parameters
//
//	tls=LIST      UCX_TLS of this agent, e.g. tcp or posix,sysv,cma; a
//	              list that selects no usable transport fails Open with
//	              INVALID_ARGUMENT
//	UCX_NAME=V    any other UCX setting, passed to ucp_config_modify
//	              unchanged (e.g. UCX_TCP_KEEPIDLE=5s); a value UCX refuses
//	              fails Open with INVALID_ARGUMENT. UCX 1.13 accepts names
//	              it does not know (they may belong to a transport), so a
//	              misspelt name is silently ignored; it also ignores some
//	              transports' prefixed settings given this way (posix and
//	              sysv ones: it logs "invalid configurations"), which only
//	              the environment sets.
//
// Any other key fails Open with INVALID_ARGUMENT. UCX also reads UCX_*
// from the process environment; parameters override it.
package ucx
