package ucx

import (
	"context"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/kit"
)

// notifSend is a notification UCX is still sending; its buffer lives in C
// until the send completes.
type notifSend struct {
	peer *peer
}

// notifKey marks notification-send op ids apart from handle ids.
const notifKey = 1 << 63

// SendNotifications sends each message to its peer as an active message
// (eager, so it is delivered whole). OK means it was handed to UCX, which
// delivers it exactly once, in order per sender, unless the peer is lost.
func (t *Transport) SendNotifications(ctx context.Context, msgs []sdk.OutboundNotification) ([]error, error) {
	out := make([]error, len(msgs))
	err := t.do(ctx, "SendNotifications", len(msgs), func(a *agent) {
		for i, m := range msgs {
			out[i] = a.sendNotification(m)
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (a *agent) sendNotification(m sdk.OutboundNotification) error {
	kp, err := a.book.CheckSend(m)
	if err != nil {
		return err
	}
	p := kp.Value
	if p.lost != nil {
		return p.lost
	}
	id := notifKey | kit.NewID()
	if !a.nw.sendMsg(p.cp, id, a.cname, len(a.name), m.Message) {
		return sdk.Errorf(sdk.CodeBackend, "ucx: SendNotifications: out of memory copying a message of %d bytes; not sent, retry", len(m.Message))
	}
	a.sends[id] = &notifSend{peer: p}
	p.sends++
	return nil
}

// Notifications drains up to max received messages (all when max <= 0).
// A message UCX delivered but the shim could not copy (out of memory) is
// lost: the next call reports how many were, as a BACKEND error of the
// call, and drains nothing; the call after it drains what arrived.
func (t *Transport) Notifications(ctx context.Context, max int) ([]sdk.Notification, error) {
	var out []sdk.Notification
	var lost error
	err := t.do(ctx, "Notifications", 0, func(a *agent) {
		if l := a.nw.msgLost(); l != a.lostSeen {
			lost = sdk.Errorf(sdk.CodeBackend, "ucx: Notifications: agent %q dropped %d received notifications: out of memory copying them out of UCX (their senders were told they were sent); later ones are kept", a.name, l-a.lostSeen)
			a.lostSeen = l
			return
		}
		out = a.book.Notifications(max)
	})
	if err == nil {
		err = lost
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}
