package host

import (
	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
)

// runLocal makes w's call against tp on the calling goroutine when tp can
// answer it at once in the host's own process (plugin.LocalAnswerer: a
// Plugin over prompt rings, for what its completion ring already brought);
// ok false: the call was not made, and the executor makes it as usual. The
// owner goroutine uses it only while nothing it handed the executor is
// unreported (Host.queued), so the calls keep the order core handed them
// out in; it costs no goroutine hand-off, where the executor costs two
// (there and back) per call.
func runLocal(tp sdk.Transport, w core.Work) (workResult, bool) {
	l, ok := tp.(plugin.LocalAnswerer)
	if !ok {
		return workResult{}, false
	}
	r := workResult{id: w.ID}
	switch w.Kind {
	case core.WorkEvents:
		r.res.Events, ok = l.EventsNow(0)
	case core.WorkNotifications:
		r.res.Notifications, ok = l.NotificationsNow(0)
	case core.WorkRelease:
		r.res.Errs, ok = l.ReleaseNow(w.Handles)
	default:
		return workResult{}, false
	}
	return r, ok
}
