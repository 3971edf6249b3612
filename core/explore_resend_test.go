package core

import (
	"strings"

	"github.com/custody-dev/custody/sdk"
)

// The world's ground truth of rule 15 (metadata is resent): per epoch,
// which agent each loaded peer id is, the first notification handed out to
// each agent while its peer is connected, and the agents whose first one
// failed, with the id it went to. A stale agent must be loaded again (a
// new id) before anything is sent to it; nothing may go to the old id.
type resendTruth struct {
	agents map[sdk.PeerID]string // loaded id -> agent ("p0": rank 0 of p)
	first  map[string]noteRef
	stale  map[string]sdk.PeerID
}

// noteRef is one notification of a SendNotifications Work.
type noteRef struct {
	work WorkID
	k    int
}

func newResendTruth() *resendTruth {
	return &resendTruth{agents: map[sdk.PeerID]string{}, first: map[string]noteRef{}, stale: map[string]sdk.PeerID{}}
}

// loaded records what a LoadPeers created: a new id of an agent is a
// (re)load of its metadata, which ends its staleness.
func (r *resendTruth) loaded(id sdk.PeerID, agent string) {
	r.agents[id] = agent
	delete(r.stale, agent)
}

// removed forgets the agents of peer: a new connection of it starts
// afresh, and a failure of a notification sent before is no one's.
func (r *resendTruth) removed(peer string) {
	for a := range r.first {
		if strings.TrimRight(a, "0123456789") == peer {
			delete(r.first, a)
			delete(r.stale, a)
		}
	}
}

// checkResend holds a Work that sends to peers to rule 15: nothing goes to
// the id of an agent whose first notification failed; and records each
// agent's first notification.
func (w *world) checkResend(wk Work) {
	r := w.resend[wk.Epoch]
	if r == nil {
		return
	}
	to := func(id sdk.PeerID, what string) {
		a := r.agents[id]
		if s, ok := r.stale[a]; ok && s == id {
			w.fail("rule 15: work %d (%v) %s agent %s at peer id %d, where its first notification failed, without loading its metadata again", wk.ID, wk.Kind, what, a, id)
		}
	}
	switch wk.Kind {
	case WorkSendNotifications:
		for k, n := range wk.Notes {
			to(n.Peer, "notifies")
			if a, ok := r.agents[n.Peer]; ok {
				if _, seen := r.first[a]; !seen {
					r.first[a] = noteRef{wk.ID, k}
				}
			}
		}
	case WorkPost:
		for _, p := range wk.Posts {
			if len(p.Notification) > 0 {
				to(w.dlists[wk.Epoch][p.Remote].peer, "has a transfer carry a notification to")
			}
		}
	}
}

// sentResult takes the result of a SendNotifications Work: an agent's
// first notification that failed (the call, or its item, with a code
// other than INVALID_ARGUMENT) makes the agent stale.
func (w *world) sentResult(wk Work, whole error, k int, itemErr error) {
	r := w.resend[wk.Epoch]
	if r == nil || wk.Kind != WorkSendNotifications {
		return
	}
	for i, n := range wk.Notes {
		a, ok := r.agents[n.Peer]
		if !ok || r.first[a] != (noteRef{wk.ID, i}) {
			continue
		}
		failed := whole != nil || (itemErr != nil && i == k && sdk.CodeOf(itemErr) != sdk.CodeInvalidArgument)
		if failed {
			r.stale[a] = n.Peer
		}
	}
}
