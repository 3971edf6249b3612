package ucx

import (
	"strings"

	"github.com/custody-dev/custody/sdk"
)

// ownCopy are the UCX transports over which every byte a peer puts into or
// gets out of memory this agent registered is copied by this agent's own
// process, so that killing the process stops incoming transfers too: over
// tcp UCP emulates puts and gets over active messages that this agent's
// progress copies into and out of the region (Paths in doc.go); self is
// this process. The conformance check fence/incoming holds tcp to it.
//
// posix, sysv and cma are not listed, though by Paths only this agent's
// progress copies into its regions there too (puts and gets are emulated
// through its FIFO; cma serves only active-message rendezvous, which this
// agent's own thread pulls): fence/incoming cannot observe it, because
// there the initiator exits as soon as the target dies (PeerLoss
// process-exits), which the check reports as a failed Poll before it can
// compare a byte. Claim only what the suite proves.
var ownCopy = map[string]bool{"tcp": true, "self": true}

// fenceScope is the FenceScope of an agent whose UCX_TLS is tls:
// initiated-and-incoming when the list names only ownCopy transports;
// initiated for any other list, a negated one or an alias (sm, shm, all)
// included, and for RDMA, xpmem or knem, which let a peer reach the memory
// without this process.
func fenceScope(tls string) sdk.FenceScope {
	named := false
	for _, t := range strings.Split(tls, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		if !ownCopy[t] {
			return sdk.FenceInitiated
		}
		named = true
	}
	if !named {
		return sdk.FenceInitiated
	}
	return sdk.FenceInitiatedAndIncoming
}
