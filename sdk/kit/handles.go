package kit

import (
	"github.com/custody-dev/custody/sdk"
)

// Handle is a posted transfer as a Book records it. Its state starts
// IN_PROGRESS and turns terminal exactly once, by Complete.
type Handle[R, P, D, H any] struct {
	ID           sdk.HandleID
	Op           sdk.Op
	Local        *Dlist[R, P, D]
	Remote       *Dlist[R, P, D]
	Pairs        []Pair[R]
	Notification []byte // a copy of the post's, nil when none
	Value        H      // the transport's own state: a native request

	state    sdk.State
	reason   error
	released bool
	one      [1]Pair[R] // Pairs of a one-pair post, without a second allocation
}

// Pair is one descriptor pair of a post: Local[i] moves to or from
// Remote[i]. Region is the local descriptor's region; the remote
// descriptor's region is the peer's (Handle.Remote.Peer). LocalIndex and
// RemoteIndex are the descriptors' indices in their dlists, by which a
// transport finds what it resolved at Prepare (Dlist.Value).
type Pair[R any] struct {
	Local       sdk.Descriptor
	Region      *Region[R]
	Remote      sdk.Descriptor
	LocalIndex  uint32
	RemoteIndex uint32
}

// State returns the handle's last state and the reason of a FAILED or
// CANCELED one.
func (h *Handle[R, P, D, H]) State() (sdk.State, error) { return h.state, h.reason }

// Released reports whether the handle was released (a running transfer of
// a misbehaving transport can outlive its handle).
func (h *Handle[R, P, D, H]) Released() bool { return h.released }

// Bytes is the number of bytes the transfer moves.
func (h *Handle[R, P, D, H]) Bytes() uint64 {
	var n uint64
	for _, p := range h.Pairs {
		n += p.Local.Length
	}
	return n
}

// Post checks a transfer (CheckPost), starts it and records its handle
// (AddHandle), IN_PROGRESS.
//
// start begins the transfer natively; it must not wait for bytes to move.
// When it fails (a lost peer: REMOTE_DISCONNECT) nothing is recorded and
// its error is the item's; the id it saw is never used again. A recorded
// handle pins both dlists until it is released.
func (b *Book[R, P, D, H]) Post(spec sdk.PostSpec, start func(*Handle[R, P, D, H]) error) (sdk.HandleID, error) {
	h, err := b.CheckPost(spec)
	if err != nil {
		return 0, err
	}
	if start != nil {
		if err := start(h); err != nil {
			return 0, err
		}
	}
	b.AddHandle(h)
	return h.ID, nil
}

// CheckPost checks a transfer and returns its handle under a fresh id,
// not recorded yet: a transport that starts a whole batch of posts in one
// native call checks each, starts the batch, then records with AddHandle
// those that started. An invalid op; a local dlist that is unknown or
// remote, or a remote one that is unknown or local; empty or unequal
// index lists; more pairs than Limits.MaxDescriptorsPerPost; an index
// outside its dlist; pairs whose lengths differ; more bytes than
// Limits.MaxTransferBytes; or a notification over
// Limits.MaxNotificationBytes are INVALID_ARGUMENT.
func (b *Book[R, P, D, H]) CheckPost(spec sdk.PostSpec) (*Handle[R, P, D, H], error) {
	h, err := b.checkPost(spec)
	if err != nil {
		return nil, err
	}
	h.ID = b.newHandleID()
	return h, nil
}

// AddHandle records a handle CheckPost returned, IN_PROGRESS, pinning both
// its dlists until it is released. A handle CheckPost returned and never
// added is forgotten; its id is not used again.
func (b *Book[R, P, D, H]) AddHandle(h *Handle[R, P, D, H]) {
	h.state = sdk.StateInProgress
	b.handles[h.ID] = h
	b.running++
	h.Local.users++
	h.Remote.users++
}

func (b *Book[R, P, D, H]) checkPost(spec sdk.PostSpec) (*Handle[R, P, D, H], error) {
	bad := func(format string, args ...any) (*Handle[R, P, D, H], error) {
		return nil, b.errorf(sdk.CodeInvalidArgument, "Post: "+format, args...)
	}
	if !spec.Op.Valid() {
		return bad("op %v is neither READ nor WRITE", spec.Op)
	}
	local, remote := b.dlists[spec.Local], b.dlists[spec.Remote]
	n := len(spec.LocalIndices)
	lim := b.limits
	switch {
	case local == nil || !local.Local():
		return bad("local dlist %d is unknown or not local", spec.Local)
	case remote == nil || remote.Local():
		return bad("remote dlist %d is unknown or not remote", spec.Remote)
	case n == 0 || n != len(spec.RemoteIndices):
		return bad("%d local and %d remote indices; want equal, non-zero counts", n, len(spec.RemoteIndices))
	case lim.MaxDescriptorsPerPost > 0 && n > int(lim.MaxDescriptorsPerPost):
		return bad("%d descriptor pairs exceed the limit of %d", n, lim.MaxDescriptorsPerPost)
	case lim.MaxNotificationBytes > 0 && len(spec.Notification) > int(lim.MaxNotificationBytes):
		return bad("notification of %d bytes exceeds the limit of %d", len(spec.Notification), lim.MaxNotificationBytes)
	}
	h := &Handle[R, P, D, H]{Op: spec.Op, Local: local, Remote: remote}
	if n == 1 {
		h.Pairs = h.one[:]
	} else {
		h.Pairs = make([]Pair[R], n)
	}
	var total uint64
	for i, li := range spec.LocalIndices {
		ri := spec.RemoteIndices[i]
		if int(li) >= len(local.Descs) || int(ri) >= len(remote.Descs) {
			return bad("pair %d: index %d or %d out of range (dlists of %d and %d)", i, li, ri, len(local.Descs), len(remote.Descs))
		}
		l, r := local.Descs[li], remote.Descs[ri]
		if l.Length != r.Length {
			return bad("pair %d: local descriptor %d has %d bytes, remote descriptor %d has %d", i, li, l.Length, ri, r.Length)
		}
		h.Pairs[i] = Pair[R]{Local: l, Region: local.Regions[li], Remote: r, LocalIndex: li, RemoteIndex: ri}
		total += l.Length
	}
	if max := lim.MaxTransferBytes; max > 0 && total > max {
		return bad("%d bytes exceed the limit of %d per transfer", total, max)
	}
	if len(spec.Notification) > 0 {
		h.Notification = append([]byte(nil), spec.Notification...)
	}
	return h, nil
}

// newHandleID draws a fresh id, unless a misbehaving owner picks one.
func (b *Book[R, P, D, H]) newHandleID() sdk.HandleID {
	if f := b.misbehave.HandleID; f != nil {
		if id, ok := f(); ok {
			return id
		}
	}
	return sdk.HandleID(NewID())
}

// Find returns a live (unreleased) handle, or nil. Unlike Handle it builds
// no error: a transport routing native completions to handles calls it.
func (b *Book[R, P, D, H]) Find(id sdk.HandleID) *Handle[R, P, D, H] { return b.handles[id] }

// Handle returns a live (unreleased) handle, or NOT_FOUND naming call.
func (b *Book[R, P, D, H]) Handle(call string, id sdk.HandleID) (*Handle[R, P, D, H], error) {
	h, ok := b.handles[id]
	if !ok {
		return nil, b.errorf(sdk.CodeNotFound, "%s: handle %d unknown or already released", call, id)
	}
	return h, nil
}

// Poll returns a handle's status: its state, or NOT_FOUND (the state is
// unknown, never terminal) when unknown or released.
func (b *Book[R, P, D, H]) Poll(id sdk.HandleID) sdk.HandleStatus {
	h, err := b.Handle("Poll", id)
	if err != nil {
		return sdk.HandleStatus{Err: err}
	}
	return sdk.HandleStatus{State: h.state, Reason: h.reason}
}

// Complete turns an IN_PROGRESS handle terminal, once: state must be DONE,
// FAILED or CANCELED, and reason says why a FAILED or CANCELED one ended.
// It queues the event and reports true. It reports false, changing
// nothing, when the handle is already terminal or state is not terminal,
// so a transport may report a completion twice without harm. A handle
// released while it ran (Misbehave.ReleaseRunning) stops counting as in
// flight and reports false: it has no event, since no caller may see it.
func (b *Book[R, P, D, H]) Complete(h *Handle[R, P, D, H], state sdk.State, reason error) bool {
	if h.state.Terminal() || !state.Terminal() {
		return false
	}
	if state == sdk.StateDone {
		reason = nil
	}
	h.state, h.reason = state, reason
	b.running--
	if h.released {
		return false
	}
	b.event(sdk.Event{Handle: h.ID, State: state, Reason: reason})
	return true
}

// Cancel asks to stop a handle: NOT_FOUND when unknown or released. It
// frees nothing. stop, which asks the backend to stop the transfer, runs
// only while the handle is IN_PROGRESS: canceling a terminal handle is OK
// and changes nothing. stop may be nil (CancelNone).
func (b *Book[R, P, D, H]) Cancel(id sdk.HandleID, stop func(*Handle[R, P, D, H])) error {
	h, err := b.Handle("Cancel", id)
	if err != nil {
		return err
	}
	if stop != nil && !h.state.Terminal() {
		stop(h)
	}
	return nil
}

// Release frees a terminal handle and its pins on its dlists: NOT_FOUND
// when unknown or already released, BUSY (the handle stays valid) when it
// is not terminal. free releases it natively; when it fails the handle
// stays held and its error is the item's. free may be nil.
func (b *Book[R, P, D, H]) Release(id sdk.HandleID, free func(*Handle[R, P, D, H]) error) error {
	h, err := b.Handle("Release", id)
	if err != nil {
		return err
	}
	if !h.state.Terminal() && !b.misbehave.ReleaseRunning {
		return b.errorf(sdk.CodeBusy, "Release: handle %d is %v; poll until terminal (Cancel to stop it)", id, h.state)
	}
	if free != nil {
		if err := free(h); err != nil {
			return err
		}
	}
	delete(b.handles, id)
	h.released = true // one still running (misbehaving) stays in flight until Complete
	h.Local.users--
	h.Remote.users--
	return nil
}
