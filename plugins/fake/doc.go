// Package fake is custody's deterministic transport simulator: a real
// transport, not a mock. It implements sdk.Transport and sdk.EventSource
// in-process (New) and as the plugin binary custody-transport-fake, whose
// main passes WithExitOnCrash.
//
// # Model
//
// Regions are files mapped with mmap (MAP_SHARED). A peer's regions are
// mapped from its metadata (a versioned blob: magic, version, JSON naming
// the agent, its notification socket and each region's file range and
// lease file), so two fake agents, in one process or in two, on one host,
// really move bytes between each other. An agent may load its own metadata
// as a peer (Capabilities.Local). A DMA engine goroutine per agent copies
// each posted transfer in chunks over time, round robin over the transfers
// in flight: IN_PROGRESS means bytes are still moving, DONE means every
// byte is in place. Only then is the post's notification sent.
//
// Registration is the grant of remote access, as on RDMA: every registered
// region holds a lease (an exclusive flock on a fresh lease file in dir) for
// as long as it is registered and the process lives. Before each chunk,
// and every few milliseconds for a stalled transfer, the DMA engine probes
// that the remote region's lease is still held (a shared non-blocking
// flock that fails while the owner holds it); if the owner deregistered the
// region or died, the transfer ends FAILED with REMOTE_DISCONNECT, and
// LoadPeers of such metadata is REMOTE_DISCONNECT. So killing a fake process
// fences incoming transfers too (FenceScope initiated-and-incoming), unless
// fence=initiated turns the check off to model shared-memory transports.
//
// Notifications travel as datagrams over a unix socket per agent in the
// abstract namespace (named in the metadata; it needs no file and dies with
// the process), which delivers each once and in order per sender.
//
// # Contract details
//
// Ids of every kind come from one counter per process: never zero, never
// reused. A dlist is in use while an unreleased handle (terminal or not)
// uses it; a region while a local dlist uses it; a peer while a remote dlist
// references it. PeerSpec.Name must equal the agent name in the metadata.
// A descriptor of zero length is INVALID_ARGUMENT. Cancel stops a transfer
// before its next chunk: it then reports CANCELED, or DONE if its last chunk
// had landed. Events reports each handle's turn to a terminal state (no
// IN_PROGRESS events). Calls before Open or after Close are
// INVALID_ARGUMENT; Resources of a closed agent is zero.
//
// Limits: 65536 descriptors per dlist and per post, 4096-byte
// notifications, 1 MiB metadata; PeerLossBoundMillis is 1000 plus
// chunk_delay.
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
//	dir=PATH            where lease files live (default os.TempDir())
//	fault=RULE[;RULE...]
//	                    faults to inject, below
//	misbehave=MODE      break the contract on purpose, below
//
// A fault rule is KIND followed by optional ",key=value" settings; a rule
// that does not parse is INVALID_ARGUMENT naming the rule by position and
// text. Selectors say which operations it applies to; without one it
// applies to all:
//
//	post=N        the N-th transfer this agent accepted at Post (1-based;
//	              each PostSpec counts, a refused one does not)
//	peer=NAME     transfers to or from the peer agent NAME
//	prob=P        each candidate with probability P (seeded)
//	times=K       at most K times in all (default unlimited)
//
// Transfer kinds (stall, fail, disconnect, release-fail, poll-fail,
// notif-drop, notif-delay) are selected once per transfer at Post; of each
// kind the first rule that selects it applies (of fail and disconnect, the
// first selected). notif-drop and notif-delay rules without post= also
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
//	                     that call and every later one with PLUGIN_SHUTDOWN.
//	                     crash takes no selectors.
//
// Misbehaving modes violate the contract so that the conformance suite can
// prove it catches each violation:
//
//	release-running  Release of a running handle returns OK and its bytes
//	                 keep moving (the transfer keeps the memory mapped and
//	                 counts as in flight until it ends)
//	reuse-ids        handle ids repeat after 64 posts: each later post
//	                 takes the oldest released handle id, if any
//	early-done       DONE (and the notification) is reported before the
//	                 last chunk lands; it lands at least 50ms (or
//	                 chunk_delay) later
//
// # Counters
//
// Resources counts every native resource the agent holds (regions, peers,
// dlists, handles, transfers in flight), so tests can assert that nothing
// leaked. Close stops every goroutine of the agent.
//
// NewRegionFile makes a region file for tests and demos.
package fake
