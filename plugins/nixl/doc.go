// Package nixl is custody's NIXL transport: a NIXL agent (NIXL's C API,
// libnixl_capi, through the small shim in shim.c) in its own process
// behind the transport contract, so that every ownership rule of the host
// applies to it and the agent is fenced by killing its process. It
// implements sdk.Transport in process (New) and as the plugin binary
// custody-transport-nixl.
//
// It builds only with the nixl build tag against a NIXL that scripts/nixl.sh
// finds and sets CGO_CPPFLAGS and CGO_LDFLAGS for: NIXL_PREFIX, pkg-config's
// nixl, or NIXL from the package registries, which make test-nixl installs
// into .nixl (the nixl-cu12 wheel's libraries, backend plugins and bundled
// UCX, and the C API's header, wrapper.h, from the crates registry's
// nixl-sys of the same version: NIXL's wheels carry no header). Without one
// make build says why it skipped the binaries, and the package holds only
// its pure-Go parts (metadata, parameters, the peer watch) and a test that
// says why the NIXL tests did not run. Tested on every landing against the
// registry's NIXL 1.5.1 and the UCX 1.23.0 it bundles; developed first
// against NIXL 1.4 over Debian's UCX 1.13.
//
// # Model
//
// One nixlAgent per process, named by Open's agent name, created with
// NIXL's progress thread (the agent config's enable_prog_thread), and one backend,
// created by parameter (backend=UCX by default) and named in every call
// (the opt args' backends). NIXL's progress thread drives the UCX worker
// between calls: over tcp and shared memory a peer's puts and gets into this
// agent, and notifications, need this side's progress. Transport calls run
// on their callers' goroutines under one lock, and the contract's
// bookkeeping (ids, tables, BUSY pins, handle states, inbox, the Open and
// Close gate, limits) is a kit.Book. The calls map to NIXL as:
//
//	RegisterMemory      map the region file (MAP_SHARED), registerMem (DRAM)
//	DeregisterMemory    deregisterMem, munmap
//	LocalMetadata       getLocalMD, in an envelope (below)
//	LoadPeers           loadRemoteMD (after the envelope's checks)
//	UnloadPeers         invalidateRemoteMD, deferred (see Peers)
//	PrepareDescriptors  prepXferDlist (local: NIXL_INIT_AGENT)
//	ReleaseDescriptors  releasedDlistH
//	Post                makeXferReq + postXferReq, the notification in the
//	                    opt args (one NIXL request per PostSpec)
//	Poll                getXferStatus of each running handle (which also
//	                    progresses the worker)
//	Release             releaseXferReq, only of a terminal handle
//	SendNotifications   genNotif; Notifications getNotifs
//
// The transport is no EventSource and no Waker: NIXL tells completion only
// when asked, so the plugin's ring pump polls the handles in flight, and
// drains notifications on its own schedule, as the sdk/plugin does for any
// transport that is neither.
//
// Metadata is NIXL's blob wrapped in an envelope of ours, versioned and
// checksummed (metadata.go): the agent name, its pid and start time, and
// each region's custody id, address and length, which NIXL's blob does not
// carry. Garbage, truncated metadata, another version, or a name other
// than the metadata's agent is INVALID_ARGUMENT before NIXL sees it (NIXL
// names the agent only once it loaded the blob). NIXL refuses to load an
// agent's own metadata, so the transport claims no Local transfers.
//
// # Where NIXL differs from the contract, and what the adapter does
//
//   - Release: NIXL's releaseXferReq of a request still in progress tries
//     to abort it (ucp_request_cancel, which does not stop a put or get)
//     and frees it while UCX may still run it. Release of a handle that is
//     not terminal is BUSY instead and NIXL is not called.
//   - Cancel: NIXL has no cancel of a posted transfer. Cancel is accepted
//     and changes nothing (CancelNone); the handle runs to DONE or FAILED.
//     A host that must stop transfers fences the process.
//   - DONE: NIXL's UCX backend flushes the endpoint after a post's puts or
//     gets and reports NIXL_SUCCESS only once every request, the flush
//     included, completed, so DONE means the bytes are at the destination.
//     A post's notification is sent by NIXL only after that, and the
//     request stays NIXL_IN_PROG until the send completed: it is delivered
//     only after DONE, and never for a transfer that failed. NIXL sends it
//     from getXferStatus (or from postXferReq when the transfer finished
//     at once), so it leaves when the handle is next polled: the plugin's
//     ring pump polls every running handle, so with the plugin it leaves
//     within the pump's poll interval; an in-process caller must poll.
//   - Peer loss, with UCX peer error handling (ucx_error_handling_mode=peer,
//     NIXL's default; tcp): UCX completes every request on a failed
//     endpoint with an error. NIXL 1.5 answers NIXL_ERR_REMOTE_DISCONNECT
//     for each and keeps the agent's metadata; NIXL 1.4 answered it for
//     the first, dropped the metadata, and NIXL_ERR_NOT_FOUND for the rest.
//     NIXL's C API folds REMOTE_DISCONNECT into ERROR_BACKEND with NIXL's
//     other failures, so the transport takes a request to a peer that
//     NIXL failed (getXferStatus, postXferReq, genNotif: ERROR_BACKEND or
//     NOT_FOUND) as that peer's endpoint failing: the handle ends FAILED
//     with REMOTE_DISCONNECT and the peer is marked lost. Post to it and
//     SendNotifications to it are then REMOTE_DISCONNECT,
//     PrepareDescriptors on it BACKEND, and UnloadPeers invalidates it
//     (NIXL's NOT_FOUND there means it already dropped the agent). A
//     request NIXL failed for another reason costs the host a reload of
//     that peer, never a byte: the request ended either way. PeerLoss is
//     reported, bound 30 s (a reset connection shows in milliseconds; an
//     idle one through UCX's TCP keepalive).
//   - Peer loss without peer error handling (ucx_error_handling_mode=none,
//     which UCX 1.13 needs over shared memory): UCX reports nothing and a
//     request to a dead peer never completes, and could never be released
//     safely. The agent watches each loaded peer's process (pid and start
//     time from the envelope, a pidfd) and exits (status 4) when one dies
//     while loaded: the host fences it (PeerLossProcessExits). Peers then
//     share the host, as shared memory needs anyway.
//   - Peers: NIXL keys remote agents by name, so two loads of one agent
//     share its NIXL state (counted), and a load of an agent NIXL still
//     knows under another connection is INVALID_ARGUMENT (NIXL's
//     NIXL_ERR_NOT_ALLOWED, ERROR_BACKEND through the C API: the transport
//     knows which agents it loaded). The last UnloadPeers of an agent parks its
//     NIXL state instead of invalidating it (names.go): closing a UCX 1.13
//     endpoint whose wire-up has not finished (loaded and unloaded without
//     a transfer) makes UCX in the peer's process fail an assertion
//     (ucp_request.c, "got REP message") when the connection goes, killing
//     the peer's transport. A parked agent loaded again reuses its
//     endpoint; beyond 16 parked agents the longest parked is invalidated,
//     and all at Close. A parked agent is unreachable through the contract:
//     no dlist or post can name it.
//   - Endpoint teardown before wire-up (UCX 1.13, not NIXL): a UCX
//     endpoint is wired up lazily, by its first transfer. When one is torn
//     down before that (a peer loaded and then unloaded or closed without
//     a transfer), UCX 1.13 fails an assertion (ucp_request.c, "got REP
//     message") in whichever process still holds the half-done wire-up,
//     when its connection fails or its worker is destroyed, and that
//     transport process dies. Parking (above) avoids the common case, a
//     peer unloaded and loaded again; the rest is left to the host, which
//     treats a dead transport process as a fence: no byte is lost or
//     misattributed, but the agent restarts.
//   - Post: a post NIXL refuses issued nothing still running (the UCX
//     backend fails a post only on an endpoint that failed, and releases
//     what it started); its request is released at once.
//   - Post over cma (NIXL 1.5.1 with its UCX 1.23.0): NIXL's postXferReq
//     copies a WRITE's bytes before it returns, so Post waits for them
//     (conformance's post-never-waits: 20 of 20 64 MiB WRITEs returned
//     only once every byte had landed). Over posix and sysv without cma,
//     and over tcp, it does not. The suite holds the transport to
//     tls=posix,sysv for shared memory; tls naming cma is accepted at that
//     cost.
//
// # Fence scope
//
// FenceScope is initiated: killing the process stops the transfers it
// posted (UCX requests live in it). Over tcp and over posix, sysv and cma
// with UCX 1.13, a peer's puts into this agent are emulated over active
// messages that this process's progress copies in, so a kill stops them
// too; but NIXL's UCX backend uses RMA where the hardware offers it (RDMA,
// a peer mapping our memory directly), where it would not. The transport
// claims only what holds on every configuration.
//
// # Parameters
//
//	backend=NAME  the NIXL backend plugin (default UCX)
//	tls=LIST      UCX_TLS of the transport process (default: $UCX_TLS,
//	              else tcp); NIXL's UCX backend reads it from the
//	              environment
//	progress_delay=D  how long NIXL's progress thread waits for the
//	              worker's events between rounds (the agent config's
//	              pthr_delay_us, rounded up to whole ms by NIXL). Default
//	              1ms, where the worker's events wake it at once (tcp).
//	              Over posix, sysv and cma it depends on the UCX loaded
//	              (params.go, shmProgressDelay): with UCX 1.13 a peer's
//	              transfers into the agent would move once per wait, and
//	              the default is NIXL's own, 0: the thread spins, a core
//	              per agent even when idle; with UCX 1.23 (NIXL's wheel)
//	              it is 1ms, which costs a peer's READ nothing
//	KEY=VALUE     any parameter the backend plugin lists (getPluginParams)
//	              and, for UCX, engine_config: passed to createBackend
//	              unchanged. UCX: ucx_error_handling_mode (peer or none;
//	              none by default when tls names posix, sysv or cma),
//	              num_workers, ucx_devices, engine_config (UCX settings
//	              NIXL applies where the environment does not set them)
//
// Any other key, and a backend NIXL refuses with its parameters, fail Open
// with INVALID_ARGUMENT. Describe before Open reports what Open without
// parameters would give ($UCX_TLS decides the error handling).
//
// # Limits
//
// Per list and per post at most 65536 descriptors, 4096 items per call,
// notifications of at most 4096 bytes, metadata of at most 1 MiB.
package nixl
