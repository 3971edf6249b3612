package core

import (
	"context"
	"fmt"

	"github.com/custody-dev/custody/sdk"
)

// execWork makes w's call against tr, as a runtime does.
func execWork(ctx context.Context, tr sdk.Transport, w Work) (Result, error) {
	var res Result
	var err error
	switch w.Kind {
	case WorkPost:
		res.Posts, err = tr.Post(ctx, w.Posts)
	case WorkPoll:
		res.States, err = tr.Poll(ctx, w.Handles)
	case WorkEvents:
		es, ok := tr.(sdk.EventSource)
		if !ok {
			return res, sdk.Errorf(sdk.CodeUnsupported, "the transport has no Events")
		}
		res.Events, err = es.Events(ctx, 0)
	case WorkRelease:
		res.Errs, err = tr.Release(ctx, w.Handles)
	case WorkCancel:
		res.Errs, err = tr.Cancel(ctx, w.Handles)
	case WorkSendNotifications:
		res.Errs, err = tr.SendNotifications(ctx, w.Notes)
	case WorkNotifications:
		res.Notifications, err = tr.Notifications(ctx, 0)
	case WorkRegisterMemory:
		res.Registrations, err = tr.RegisterMemory(ctx, w.Regions)
	case WorkDeregisterMemory:
		res.Errs, err = tr.DeregisterMemory(ctx, w.RegionIDs)
	case WorkLoadPeers:
		res.PeerResults, err = tr.LoadPeers(ctx, w.Peers)
	case WorkUnloadPeers:
		res.Errs, err = tr.UnloadPeers(ctx, w.PeerIDs)
	case WorkPrepareDescriptors:
		res.DlistResults, err = tr.PrepareDescriptors(ctx, w.Dlists)
	case WorkReleaseDescriptors:
		res.Errs, err = tr.ReleaseDescriptors(ctx, w.DlistIDs)
	case WorkClose:
		err = tr.Close(ctx)
	default:
		panic(fmt.Sprintf("execWork: unknown kind %v", w.Kind))
	}
	return res, err
}

// drive runs rd's Work and all the Work it leads to, in order, against the
// transport of each Work's epoch (trs; a missing one is a dead process),
// and returns rd's reports merged with those the Work produced.
func drive(ctx context.Context, c *Core, trs func(Epoch) sdk.Transport, rd Ready) Ready {
	all := rd
	all.Work = nil
	work := rd.Work
	for len(work) > 0 {
		for _, w := range work {
			tr := trs(w.Epoch)
			if tr == nil {
				c.Done(w.ID, Result{}, sdk.Errorf(sdk.CodePluginShutdown, "epoch %d has no process", w.Epoch))
				continue
			}
			res, err := execWork(ctx, tr, w)
			c.Done(w.ID, res, err)
		}
		next := c.Ready()
		work = next.Work
		all = mergeReady(all, next)
	}
	return all
}

func mergeReady(a, b Ready) Ready {
	a.FinishedSending = append(a.FinishedSending, b.FinishedSending...)
	a.FinishedReceiving = append(a.FinishedReceiving, b.FinishedReceiving...)
	a.Failed = append(a.Failed, b.Failed...)
	a.InvalidBlocks = append(a.InvalidBlocks, b.InvalidBlocks...)
	a.Quarantined = append(a.Quarantined, b.Quarantined...)
	for _, e := range b.Fence {
		dup := false
		for _, f := range a.Fence {
			dup = dup || f == e
		}
		if !dup {
			a.Fence = append(a.Fence, e)
		}
	}
	a.Alerts = append(a.Alerts, b.Alerts...)
	a.Next = b.Next // the later schedule holds
	return a
}

// one is a transport lookup for a single transport of every epoch.
func one(tr sdk.Transport) func(Epoch) sdk.Transport {
	return func(Epoch) sdk.Transport { return tr }
}
