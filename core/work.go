package core

import (
	"fmt"
	"slices"

	"github.com/custody-dev/custody/sdk"
)

// WorkID names one Work core handed out; ids grow and are never reused by
// one Core.
type WorkID uint64

// WorkKind says which transport call a Work is.
type WorkKind uint8

// The kinds of Work, one per batched sdk.Transport call core needs.
const (
	WorkPost               WorkKind = iota + 1 // Post(Posts)
	WorkPoll                                   // Poll(Handles)
	WorkEvents                                 // sdk.EventSource.Events(0)
	WorkRelease                                // Release(Handles)
	WorkCancel                                 // Cancel(Handles)
	WorkSendNotifications                      // SendNotifications(Notes)
	WorkNotifications                          // Notifications(0)
	WorkRegisterMemory                         // RegisterMemory(Regions)
	WorkDeregisterMemory                       // DeregisterMemory(RegionIDs)
	WorkLoadPeers                              // LoadPeers(Peers)
	WorkUnloadPeers                            // UnloadPeers(PeerIDs)
	WorkPrepareDescriptors                     // PrepareDescriptors(Dlists)
	WorkReleaseDescriptors                     // ReleaseDescriptors(DlistIDs)
	WorkClose                                  // Close()
)

var workNames = [...]string{
	WorkPost: "Post", WorkPoll: "Poll", WorkEvents: "Events", WorkRelease: "Release",
	WorkCancel: "Cancel", WorkSendNotifications: "SendNotifications", WorkNotifications: "Notifications",
	WorkRegisterMemory: "RegisterMemory", WorkDeregisterMemory: "DeregisterMemory",
	WorkLoadPeers: "LoadPeers", WorkUnloadPeers: "UnloadPeers",
	WorkPrepareDescriptors: "PrepareDescriptors", WorkReleaseDescriptors: "ReleaseDescriptors",
	WorkClose: "Close",
}

func (k WorkKind) String() string {
	if int(k) < len(workNames) && workNames[k] != "" {
		return workNames[k]
	}
	return fmt.Sprintf("WorkKind(%d)", uint8(k))
}

// Work is one batched transport call core wants made, against the
// transport of Epoch: the field of its Kind holds the call's argument. The
// runtime makes the call (from any goroutine; core is not touched meanwhile)
// and reports its outcome with Done, exactly once per Work, in any order.
// Work of an epoch fenced meanwhile may be skipped; it must still be
// reported (its result is ignored).
type Work struct {
	ID        WorkID
	Epoch     Epoch
	Kind      WorkKind
	Posts     []sdk.PostSpec
	Handles   []sdk.HandleID
	Notes     []sdk.OutboundNotification
	Regions   []sdk.Region
	RegionIDs []sdk.RegionID
	Peers     []sdk.PeerSpec
	PeerIDs   []sdk.PeerID
	Dlists    []sdk.DlistSpec
	DlistIDs  []sdk.DlistID
}

// Result is what the call of a Work returned: the field of its Kind (Errs
// for the calls that return one error per item). A call-level error is
// Done's err, not part of the Result.
type Result struct {
	Posts         []sdk.PostResult
	States        []sdk.HandleStatus
	Events        []sdk.Event
	Errs          []error
	Registrations []sdk.Registration
	PeerResults   []sdk.PeerResult
	DlistResults  []sdk.DlistResult
	Notifications []sdk.Notification
}

// pendingWork is a Work handed out and not yet reported: then runs with its
// outcome when Done reports it, or with errWorkFenced when its epoch is
// fenced first (the call died with the process). A fenced one stays as a
// tombstone until Done, so its late report is recognised.
type pendingWork struct {
	kind   WorkKind
	epoch  Epoch
	round  bool // a Notifications, Events or Poll of a round
	fenced bool
	then   func(res Result, err error)
}

// errWorkFenced is the outcome a pending Work's continuation sees when its
// epoch is fenced before Done reports it.
var errWorkFenced = fmt.Errorf("the call's transport epoch was fenced: %w", ErrFenced)

// emit hands out w (for the attached epoch) and runs then on its outcome.
func (c *Core) emit(w Work, then func(Result, error)) {
	if !c.attached {
		then(Result{}, errWorkFenced) // nothing to call: the epoch is gone
		return
	}
	c.nextWork++
	w.ID, w.Epoch = c.nextWork, c.epoch
	pw := &pendingWork{kind: w.Kind, epoch: w.Epoch, then: then}
	if w.Kind == WorkNotifications || w.Kind == WorkEvents || w.Kind == WorkPoll {
		pw.round = true
		c.roundOut++
	}
	c.pending[w.ID] = pw
	c.out.Work = append(c.out.Work, w)
}

// Done reports the outcome of the Work id: its result, or the error of the
// call as a whole. A report of an unknown Work (reported twice, or never
// handed out) changes nothing but an Alert; one of a fenced epoch is
// ignored. What it produced is in the next Ready (or Poll).
func (c *Core) Done(id WorkID, res Result, err error) {
	pw := c.pending[id]
	if pw == nil {
		c.alert(Alert{Level: AlertError, Kind: "work_unknown", Err: fmt.Errorf("work %d was reported but is not outstanding (reported twice, or never handed out): ignored", id)})
		return
	}
	delete(c.pending, id)
	if pw.fenced {
		return
	}
	c.settled(pw)
	c.noteTimeout(pw.epoch, err)
	pw.then(res, err)
}

// settled accounts for a pending Work that ran its continuation.
func (c *Core) settled(pw *pendingWork) {
	if pw.round {
		c.roundOut--
	}
}

// noteTimeout counts consecutive calls that timed out: a transport whose
// last Config.WedgedAfter calls all timed out is wedged, and its epoch is
// fenced rather than left to stall every round.
func (c *Core) noteTimeout(e Epoch, err error) {
	if e != c.epoch || !c.attached {
		return
	}
	if sdk.CodeOf(err) != sdk.CodeTimeout || err == nil {
		c.timeouts = 0
		return
	}
	c.timeouts++
	if c.timeouts >= c.cfg.WedgedAfter {
		c.requestFence(e, Alert{Level: AlertError, Kind: "transport_wedged", Err: fmt.Errorf("%d consecutive calls to epoch %d timed out: %w", c.timeouts, e, err)})
	}
}

// abortWork runs the continuation of every pending Work of a fenced epoch
// with errWorkFenced, in the order they were handed out, and keeps them as
// tombstones until Done.
func (c *Core) abortWork(e Epoch) {
	var ids []WorkID
	for id, pw := range c.pending {
		if pw.epoch == e && !pw.fenced {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		pw := c.pending[id]
		pw.fenced = true
		c.settled(pw)
		pw.then(Result{}, errWorkFenced)
	}
}

// outstandingLive counts pending Work whose epoch was not fenced.
func (c *Core) outstandingLive() int {
	n := 0
	for _, pw := range c.pending {
		if !pw.fenced {
			n++
		}
	}
	return n
}
