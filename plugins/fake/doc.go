// Package fake is custody's deterministic transport simulator: a real
// transport, not a mock. It implements sdk.Transport, sdk.EventSource and
// sdk.Waker in-process (New) and as the plugin binary
// custody-transport-fake, whose main passes WithExitOnCrash.
//
// # Model
//
// Regions are files mapped with mmap (MAP_SHARED). A peer's regions are
// mapped from its metadata (a versioned blob: magic, version, JSON naming
// the agent, its notification socket, its life lease file and each
// region's file range and lease file), so two fake agents, in one process
// or in two, on one host, really move bytes between each other. An agent may load its own metadata
// as a peer (Capabilities.Local). A DMA engine goroutine per agent copies
// each posted transfer in chunks over time, round robin over the transfers
// in flight: IN_PROGRESS means bytes are still moving, DONE means every
// byte is in place. Only then is the post's notification sent.
//
// Leases stand for what the kernel grants and revokes. Each is an exclusive
// flock on a fresh file in dir, which a peer probes with a shared
// non-blocking flock (it fails while the owner holds the lock); the kernel
// drops every lock of a process that dies. An agent holds a life lease
// from Open until Close or death, and every registered region holds a
// lease for as long as it is registered and the process lives.
//
// Fence scope and peer-loss reporting are separate. The fence parameter
// says what a dead agent's registration revokes, that is, whether killing
// an agent stops transfers its peers initiated into or out of its memory:
//
//   - fence=incoming (default, FenceScope initiated-and-incoming):
//     registration is the grant of remote access, as on RDMA, and the
//     owner's process is what moves bytes into and out of its memory, as
//     its NIC would: a peer's DMA engine hands each chunk to the owner over
//     the owner's incoming socket (named in its metadata), and the owner
//     copies it under its lock only while the region is registered and the
//     agent lives. So once the owner died (its process, the only writer,
//     is gone) or deregistered the region (it refuses the chunk), not one
//     byte more moves, not even a chunk that passed its checks just before,
//     and the transfer ends FAILED with REMOTE_DISCONNECT. A stalled
//     transfer probes the remote region's lease every few milliseconds, so
//     it ends so too while no chunk moves.
//   - fence=initiated (FenceScope initiated): the initiator maps the peer's
//     memory directly, as UCX's shared-memory transports do, so neither a
//     deregistration nor the owner's death revokes anything: chunks keep
//     landing in a dead agent's memory until the initiator notices the
//     death. It notices through a peer watch that probes the peer's life
//     lease every 20ms (and every few milliseconds for a stalled
//     transfer), and then ends the transfer FAILED with REMOTE_DISCONNECT,
//     moving no byte more.
//
// Either way peer loss is reported (PeerLoss reported): a transfer to a
// peer that died never ends DONE unless its last chunk landed before the
// death was noticed; Post
// to a peer that closed or died is REMOTE_DISCONNECT and posts nothing;
// LoadPeers of its metadata is REMOTE_DISCONNECT. The agent's own death
// (a crash fault, Kill, or the end of its process) always stops the
// transfers it initiated.
//
// Notifications travel as datagrams over a unix socket per agent in the
// abstract namespace (named in the metadata; it needs no file and dies with
// the process), which delivers each once and in order per sender. The name
// carries random bits besides pid and sequence number, so a later process
// that reuses a dead agent's pid never receives what a stale peer sends to
// the dead one (that send is REMOTE_DISCONNECT). A SendNotifications send
// waits for room in the peer's queue at most 1s and never past the call's
// deadline, trying again every 2ms (the poller would not wake it when other
// senders' datagrams are what leaves the queue); then it fails, having
// sent nothing, with BACKEND, or TIMEOUT when the call's context ended
// first (so do the messages after it, untried), and the call's later
// messages to that peer are not sent either, so that sending them again
// in order keeps the order.
//
// A post's notification is delivered exactly once after DONE, whatever the
// peer's queue: the DMA engine queues it in an outbox and tries to send it
// without waiting (through a non-blocking socket of its own, so the engine
// never blocks on it); while the peer's queue is full it stays there,
// tried again every 2ms, until it is delivered or the peer's socket is gone
// (the peer closed or died: then it is dropped). The outbox is in order per
// peer: later notifications to a peer wait behind a held one, and a
// SendNotifications message to that peer is queued behind them too (OK:
// queued for delivery). What the outbox still holds when the agent closes
// or dies is lost, as with a process that exits.
//
// # Contract details
//
// The contract's bookkeeping is a kit.Book (package sdk/kit), the same
// rules every transport built on the kit follows: ids of every kind come
// from one counter per process, never zero, never reused. A dlist is in
// use while an unreleased handle (terminal or not) uses it; a region while
// a local dlist uses it; a peer while a remote dlist references it.
// PeerSpec.Name must be non-empty and equal the agent name in the
// metadata. An empty dlist, empty index lists and a descriptor of zero
// length are INVALID_ARGUMENT. The fake states no MaxItemsPerCall. Cancel stops a transfer
// before its next chunk: it then reports CANCELED, or DONE if its last chunk
// had landed (under cancel=none it changes nothing). Events reports each
// handle's turn to a terminal state (no IN_PROGRESS events). Calls before
// Open or after Close are INVALID_ARGUMENT, but Close of a closed agent is
// OK and changes nothing (the agent has ended and holds nothing, all that
// Close's OK promises); Resources of a closed agent is zero. After a crash
// or Kill every call, Describe, Open and Close included, is
// PLUGIN_SHUTDOWN: the in-process agent stands for a dead process, and
// answers what sdk/plugin's Launch answers once a transport process is
// gone. Out of process a crash exits the process instead (exit code 3),
// and Launch reports it.
//
// Kill ends an in-process agent on demand exactly as the in-process crash
// of a crash fault does (below), without exiting the process.
//
// Limits: 65536 descriptors per dlist and per post, 4096-byte
// notifications, 1 MiB metadata; PeerLossBoundMillis is 1000 plus
// chunk_delay, and so is CancelBoundMillis under cancel=stops (a canceled
// transfer stops before its next chunk, far sooner).
//
// # Parameters
//
// Open takes these parameters (sdk.OpenRequest.Params); an unknown key or a
// malformed value is INVALID_ARGUMENT. The plugin binary takes the same ones.
//
//	seed=N              seed of every probabilistic choice (default 1), so a
//	                    run replays exactly
//	chunk=BYTES         bytes copied per DMA step (default 65536)
//	chunk_delay=DUR     pause between two DMA steps (Go duration, default 0)
//	fence=incoming|initiated
//	                    the fence scope described above (default incoming)
//	cancel=stops|none   stops (default): Cancel stops a transfer before its
//	                    next chunk (CancelEffect stops); none: Cancel is
//	                    accepted (NOT_FOUND for an unknown handle) and
//	                    changes nothing, as UCX's (CancelEffect none,
//	                    Capabilities.Cancel false)
//	dir=PATH            where lease files live (default os.TempDir())
//	peer_dirs=DIR[:DIR...]
//	                    the only directories a peer's metadata may name
//	                    files in (its regions and lease files), links
//	                    resolved (default: dir and /dev/shm); LoadPeers
//	                    refuses any other path, and any notification socket
//	                    that is not a fake's, with INVALID_ARGUMENT
//	fault=RULE[;RULE...]
//	                    faults to inject, below
//	fault_log=PATH      append each firing of a fault rule, as a line
//	                    naming its kind, to the file at PATH (absolute),
//	                    so a run across processes can count what it
//	                    injected (a crash is logged before the exit)
//	misbehave=MODE      break the contract on purpose, below
//
// A fault rule is KIND followed by optional ",key=value" settings; a rule
// that does not parse is INVALID_ARGUMENT naming the rule by position and
// text. Selectors say which operations it applies to; without one it
// applies to all:
//
//	post=N        the N-th transfer this agent took at Post (1-based; each
//	              valid PostSpec counts, one failed by post-fail too; one
//	              refused as INVALID_ARGUMENT or REMOTE_DISCONNECT does not)
//	peer=NAME     transfers to or from the peer agent NAME
//	prob=P        each candidate with probability P (seeded)
//	times=K       at most K times in all (default unlimited)
//
// Transfer kinds (stall, fail, disconnect, release-fail, poll-fail,
// notif-drop, notif-delay) are selected once per transfer at Post; of each
// kind the first rule that selects it applies (of fail and disconnect, the
// first selected; once one of them applies, no rule of either kind is
// tried on that transfer, so none spends its times= budget there).
// post-fail is selected at Post too, per item, before the
// transfer exists. notif-drop and notif-delay rules without post= also
// select SendNotifications items. Kinds:
//
//	stall[,for=DUR]      the transfer stays IN_PROGRESS for DUR from Post, or
//	                     forever when for is absent; no byte moves meanwhile
//	                     (Cancel and a lost lease still end it)
//	fail[,after=K][,code=CODE]
//	                     the transfer ends FAILED after K chunks (default 0)
//	                     with CODE (default BACKEND)
//	disconnect[,after=K] the transfer ends FAILED with REMOTE_DISCONNECT after
//	                     K chunks
//	release-fail[,count=K]
//	                     Release of the selected handle fails with BACKEND K
//	                     times (default 1), then succeeds; a running handle
//	                     is BUSY first
//	poll-fail[,count=K]  Poll of the selected handle fails with BACKEND K times
//	                     (default 1); the handle's state is unchanged
//	load-peer-fail[,rank=K]
//	                     the K-th item (0-based, counted over the agent's life
//	                     among items whose metadata is valid) of LoadPeers
//	                     fails with BACKEND and loads nothing; without rank,
//	                     every item the selectors pick
//	prepare-fail[,rank=K]
//	                     the K-th valid remote dlist (0-based, over the
//	                     agent's life) of PrepareDescriptors fails with
//	                     BACKEND; without rank, every one the selectors pick
//	post-fail[,code=CODE]
//	                     Post of the selected item fails with CODE (default
//	                     BACKEND) and posts nothing (no handle, no bytes, no
//	                     notification); the call's other items are posted
//	unload-fail[,count=K]
//	                     UnloadPeers of the selected peer fails with BACKEND
//	                     and the peer stays loaded and usable, for K items
//	                     in all (default 1), then unloads succeed. Only an
//	                     item that would otherwise succeed is selected (a
//	                     BUSY or NOT_FOUND one spends nothing). Takes peer=
//	                     and prob= only
//	release-dlist-fail[,count=K]
//	                     the same for ReleaseDescriptors: the dlist stays
//	                     valid; peer= selects remote dlists of that peer
//	notif-drop           the notification of the selected transfers, or the
//	                     selected SendNotifications items, is never delivered
//	                     (the send still reports OK)
//	notif-delay,for=DUR  such notifications arrive DUR late
//	crash[,at=post|poll|release][,n=N]
//	                     the process exits at once without cleanup (exit code
//	                     3) on the N-th call of that kind (default: the first
//	                     post), before the call takes effect. In-process,
//	                     the agent instead stops its DMA engine, drops its
//	                     leases and mappings as the kernel would, and answers
//	                     that call and every later one with PLUGIN_SHUTDOWN
//	                     (Kill does the same on demand). crash takes no
//	                     selectors.
//
// Misbehaving modes violate the contract so that the conformance suite can
// prove it catches each violation (release-running and reuse-ids through
// kit.Misbehave, the Book's one door for breaking its rules; the others
// around the Book). misbehave=MODE breaks the rule at every chance;
// misbehave=MODE:P only with probability P at each (drawn from seed), so
// that the suite shows it catches a transport that breaks a rule one time
// in ten. Open brings the parameters, so a rule about calls before Open is
// broken by a mode given at New instead (WithMisbehave; the plugin binary
// reads it from CUSTODY_FAKE_MISBEHAVE), which also serves as Open's
// misbehave parameter unless Open gives one:
//
//	release-running  Release of a running handle returns OK and its bytes
//	                 keep moving (the transfer keeps the memory mapped and
//	                 counts as in flight until it ends)
//	reuse-ids        handle ids repeat after 64 posts: each later post
//	                 takes the oldest released handle id, if any
//	early-done       DONE (and the notification) is reported before the
//	                 last chunk lands; it lands only after the handle
//	                 is released (a late write into memory the caller
//	                 may already reuse)
//	terminal-flip    a handle reported DONE is reported FAILED by every
//	                 Poll from 20ms after a Poll first reported it DONE
//	                 (so that the DONE it contradicts was seen)
//	terminal-flip-next
//	                 as terminal-flip, from the very next Poll on
//	cancel-terminal  Cancel of a DONE handle makes Poll report it CANCELED
//	unpin-terminal   ReleaseDescriptors of a dlist whose unreleased handles
//	                 are all terminal returns OK (the Book frees it once
//	                 they are released)
//	close-lax        Close while only peers and remote dlists are held
//	                 returns OK and closes nothing
//	ungated          after Close, Poll and Release answer as if open
//	                 (NOT_FOUND) instead of INVALID_ARGUMENT; given at New
//	                 (WithMisbehave, or CUSTODY_FAKE_MISBEHAVE for the
//	                 plugin binary), before Open too
//	open-lax         Open ignores unknown parameters, and a second Open
//	                 returns OK
//	cancel-slow      a canceled transfer stops moving but turns CANCELED
//	                 only twice Limits.CancelBoundMillis later
//	cancel-lie       Cancel does nothing, while Describe still says
//	                 CancelEffect stops
//	fence-lie        Describe says FenceScope initiated-and-incoming while
//	                 the agent behaves as under fence=initiated
//	peer-loss-lie    a transfer whose peer died never ends (until
//	                 canceled), while Describe says PeerLoss reported
//	drop-notification
//	                 SendNotifications reports OK and delivers nothing
//
// # Counters
//
// Resources counts every native resource the agent holds (regions, peers,
// dlists, handles, transfers in flight), so tests can assert that nothing
// leaked. Close stops every goroutine of the agent.
//
// NewRegionFile makes a region file for tests and demos.
package fake
