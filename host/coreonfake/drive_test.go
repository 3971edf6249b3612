package coreonfake

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/sdk"
)

// execWork makes w's call against tr, as a runtime does.
func execWork(ctx context.Context, tr sdk.Transport, w core.Work) (core.Result, error) {
	var res core.Result
	var err error
	switch w.Kind {
	case core.WorkPost:
		res.Posts, err = tr.Post(ctx, w.Posts)
	case core.WorkPoll:
		res.States, err = tr.Poll(ctx, w.Handles)
	case core.WorkEvents:
		es, ok := tr.(sdk.EventSource)
		if !ok {
			return res, sdk.Errorf(sdk.CodeUnsupported, "the transport has no Events")
		}
		res.Events, err = es.Events(ctx, 0)
	case core.WorkRelease:
		res.Errs, err = tr.Release(ctx, w.Handles)
	case core.WorkCancel:
		res.Errs, err = tr.Cancel(ctx, w.Handles)
	case core.WorkSendNotifications:
		res.Errs, err = tr.SendNotifications(ctx, w.Notes)
	case core.WorkNotifications:
		res.Notifications, err = tr.Notifications(ctx, 0)
	case core.WorkRegisterMemory:
		res.Registrations, err = tr.RegisterMemory(ctx, w.Regions)
	case core.WorkDeregisterMemory:
		res.Errs, err = tr.DeregisterMemory(ctx, w.RegionIDs)
	case core.WorkLoadPeers:
		res.PeerResults, err = tr.LoadPeers(ctx, w.Peers)
	case core.WorkUnloadPeers:
		res.Errs, err = tr.UnloadPeers(ctx, w.PeerIDs)
	case core.WorkPrepareDescriptors:
		res.DlistResults, err = tr.PrepareDescriptors(ctx, w.Dlists)
	case core.WorkReleaseDescriptors:
		res.Errs, err = tr.ReleaseDescriptors(ctx, w.DlistIDs)
	case core.WorkClose:
		err = tr.Close(ctx)
	default:
		panic(fmt.Sprintf("execWork: unknown kind %v", w.Kind))
	}
	return res, err
}

// drive runs rd's Work and all the Work it leads to, in order, against the
// transport of each Work's epoch (trs; a missing one is a dead process),
// and returns rd's reports merged with those the Work produced.
func drive(ctx context.Context, c *core.Core, trs func(core.Epoch) sdk.Transport, rd core.Ready) core.Ready {
	all := rd
	all.Work = nil
	work := rd.Work
	for len(work) > 0 {
		for _, w := range work {
			tr := trs(w.Epoch)
			if tr == nil {
				c.Done(w.ID, core.Result{}, sdk.Errorf(sdk.CodePluginShutdown, "epoch %d has no process", w.Epoch))
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

func mergeReady(a, b core.Ready) core.Ready {
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

// closeCore calls Close, running its Work, until it returns nil, an error
// that is not ErrHeld, or ErrHeld with no Work left to run (held).
func closeCore(ctx context.Context, c *core.Core, trs func(core.Epoch) sdk.Transport, now time.Time) (core.Ready, error) {
	var all core.Ready
	for {
		err := c.Close(now)
		if err == nil || !errors.Is(err, core.ErrHeld) {
			return mergeReady(all, drive(ctx, c, trs, c.Ready())), err
		}
		rd := c.Ready()
		if len(rd.Work) == 0 {
			return mergeReady(all, rd), err
		}
		all = mergeReady(all, drive(ctx, c, trs, rd))
	}
}
