package nixl

import "github.com/custody-dev/custody/sdk"

// Version is the NIXL transport's version, as Describe reports it.
const Version = "0.1.0"

// Limits the transport enforces, as Describe reports them.
const (
	maxDescriptorsPerList = 1 << 16
	maxDescriptorsPerPost = 1 << 16
	maxItemsPerCall       = 4096
	maxNotificationBytes  = 4096
	maxMetadataBytes      = 1 << 20
	// peerLossBoundMillis bounds, with UCX peer error handling, how long
	// after a peer's death its handles turn FAILED: a reset connection
	// shows in milliseconds, an idle one through UCX's TCP keepalive.
	peerLossBoundMillis = 30000
)

// describe is what an agent with cfg promises (doc.go says why).
func describe(cfg config) sdk.Description {
	loss := sdk.PeerLossReported
	if cfg.errNone {
		loss = sdk.PeerLossProcessExits
	}
	return sdk.Description{
		Name:          "nixl",
		Version:       Version,
		ContractMajor: sdk.ContractMajor,
		ContractMinor: sdk.ContractMinor,
		MemoryKinds:   []sdk.MemoryKind{sdk.MemoryHost},
		Capabilities:  sdk.Capabilities{Remote: true, Notifications: true},
		CancelEffect:  sdk.CancelNone,
		PeerLoss:      loss,
		FenceScope:    sdk.FenceInitiated,
		Limits: sdk.Limits{
			MaxDescriptorsPerList: maxDescriptorsPerList,
			MaxDescriptorsPerPost: maxDescriptorsPerPost,
			MaxItemsPerCall:       maxItemsPerCall,
			MaxNotificationBytes:  maxNotificationBytes,
			MaxMetadataBytes:      maxMetadataBytes,
			PeerLossBoundMillis:   peerLossBoundMillis,
		},
	}
}
