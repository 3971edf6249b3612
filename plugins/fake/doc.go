// Package fake is custody's deterministic transport simulator: a real
// transport, not a mock. It implements sdk.Transport and sdk.EventSource
// in-process (New) and as the plugin binary custody-transport-fake.
//
// # Model
//
// Regions are files mapped with mmap (MAP_SHARED). A peer's regions are
// mapped from its metadata, so two fake agents, in one process or in two,
// really move bytes between each other. A DMA engine goroutine per agent
// copies each posted transfer in chunks over time: IN_PROGRESS means bytes
// are still moving, DONE means every byte is in place.
//
// Registration is the grant of remote access, as on RDMA: every registered
// region holds a lease (a shared flock on a lease file next to the region's
// metadata) for as long as it is registered and the process lives. Before
// each chunk the DMA engine checks that the remote region's lease is still
// held; if the owner died, the transfer ends FAILED with REMOTE_DISCONNECT.
// So killing a fake process fences incoming transfers too (FenceScope
// initiated-and-incoming), unless fence=initiated turns the check off to model
// shared-memory transports.
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
//	dir=PATH            where lease and notification files live (default
//	                    os.TempDir())
//	fault=RULE[;RULE...]
//	                    faults to inject, below
//	misbehave=MODE      break the contract on purpose, below
//
// A fault rule is KIND followed by optional ",key=value" settings. Selectors
// say which operations it applies to; without one it applies to all:
//
//	post=N        the N-th post of this agent (1-based; each PostSpec counts)
//	peer=NAME     transfers to or from the peer agent NAME
//	prob=P        each candidate with probability P (seeded)
//	times=K       at most K times in all (default unlimited)
//
// Kinds:
//
//	stall[,for=DUR]      the transfer stays IN_PROGRESS for DUR, or forever
//	                     when for is absent; no byte moves meanwhile
//	fail[,after=K][,code=CODE]
//	                     the transfer ends FAILED after K chunks (default 0)
//	                     with CODE (default BACKEND)
//	disconnect[,after=K] the transfer ends FAILED with REMOTE_DISCONNECT after
//	                     K chunks
//	release-fail[,count=K]
//	                     Release of the selected handle fails with BACKEND K
//	                     times (default 1), then succeeds
//	poll-fail[,count=K]  Poll of the selected handle fails with BACKEND K times
//	                     (default 1); the handle's state is unchanged
//	load-peer-fail[,rank=K]
//	                     the K-th item (0-based, counted over the agent's life)
//	                     of LoadPeers fails with BACKEND
//	prepare-fail[,rank=K]
//	                     the K-th remote dlist (0-based) of PrepareDescriptors
//	                     fails with BACKEND
//	notif-drop           the notification of the selected transfers, or the
//	                     selected SendNotifications items, is never delivered
//	notif-delay,for=DUR  such notifications arrive DUR late
//	crash[,at=post|poll|release][,n=N]
//	                     the process exits at once without cleanup (exit code
//	                     3) on the N-th call of that kind (default: the first
//	                     post). In-process, the agent instead stops its DMA
//	                     engine and answers every later call with
//	                     PLUGIN_SHUTDOWN, as a dead process would.
//
// Misbehaving modes violate the contract so that the conformance suite can
// prove it catches each violation:
//
//	release-running  Release of a running handle returns OK and its bytes
//	                 keep moving
//	reuse-ids        handle ids repeat after 64 posts
//	early-done       DONE is reported before the last chunk lands
//
// # Counters
//
// Resources counts every native resource the agent holds (regions, peers,
// dlists, handles, transfers in flight), so tests can assert that nothing
// leaked.
package fake
