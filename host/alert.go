package host

import "github.com/custody-dev/custody/core"

// alert counts and logs one of core's alerts. A linked peer's
// handshake_failed goes to its link (handshake_retry.go), which logs a
// failure once per change, not per attempt.
func (h *Host) alert(a core.Alert) {
	if a.Kind == "handshake_failed" && h.handshakeAlert(a) {
		return
	}
	h.metrics.Failures.WithLabelValues(a.Kind).Inc()
	if a.Kind == "hold_cap_fence" || a.Kind == "transfer_force_released" {
		h.metrics.Escalations.Inc()
	}
	args := []any{"failure_type", a.Kind}
	if a.Peer != "" {
		args = append(args, "peer", a.Peer)
	}
	if a.Request != "" {
		args = append(args, "request", string(a.Request))
	}
	if a.Handle != (core.Ref{}) {
		args = append(args, "handle", a.Handle.String())
	}
	if a.Err != nil {
		args = append(args, "error", a.Err.Error())
	}
	if a.Level == core.AlertError {
		h.log.Error("transfer failure", args...)
	} else {
		h.log.Warn("transfer failure", args...)
	}
}
