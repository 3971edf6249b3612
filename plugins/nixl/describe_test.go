package nixl

import (
	"testing"

	"github.com/custody-dev/custody/sdk"
)

// TestDescribe: how peer loss shows follows UCX's error handling, and the
// transport claims no cancel, events or local transfers (doc.go says why).
func TestDescribe(t *testing.T) {
	if d := describe(config{}); d.PeerLoss != sdk.PeerLossReported {
		t.Errorf("peer error handling: PeerLoss %q, want reported", d.PeerLoss)
	}
	d := describe(config{errNone: true})
	if d.PeerLoss != sdk.PeerLossProcessExits {
		t.Errorf("error handling none: PeerLoss %q, want process-exits", d.PeerLoss)
	}
	if d.CancelEffect != sdk.CancelNone || d.Capabilities.Cancel || d.Capabilities.Events || d.Capabilities.Local || !d.Capabilities.Remote || !d.Capabilities.Notifications {
		t.Errorf("claims %+v, cancel %q", d.Capabilities, d.CancelEffect)
	}
	if d.FenceScope != sdk.FenceInitiated || d.Limits.PeerLossBoundMillis == 0 || d.Limits.MaxItemsPerCall == 0 {
		t.Errorf("fence %q, limits %+v", d.FenceScope, d.Limits)
	}
}
