package client

import (
	"context"
	"errors"
	"fmt"

	enginev1 "github.com/custody-dev/custody/api/engine/v1"
)

// ErrWatching is returned by WatchFinished while another WatchFinished of
// the same Client runs: one client processes its host's reports in order.
var ErrWatching = errors.New("a WatchFinished of this client is running; one at a time")

// WatchFinished hands every finished report of the host to fn exactly once
// and in order, as soon as the host has it, until ctx ends.
//
// Each report is one round of the host, whole: a round the host split to
// fit a reply is merged again before fn sees it, so a failed receive and
// its invalid blocks always come together. Once fn returns nil the report
// is acknowledged and the host forgets it; the client remembers the cursor,
// so the next WatchFinished resumes after it.
//
// It returns ctx.Err() when ctx ends; fn's error when fn fails (that report
// is not acknowledged: the next WatchFinished hands it to fn again); and an
// *Error when the stream fails (ErrUnavailable when the connection broke or
// the host stopped: call again, nothing is lost and nothing comes twice).
func (c *Client) WatchFinished(ctx context.Context, fn func(Finished) error) error {
	c.watch.Lock()
	if c.watch.running {
		c.watch.Unlock()
		return ErrWatching
	}
	c.watch.running = true
	cursor := c.watch.cursor
	c.watch.Unlock()
	defer func() {
		c.watch.Lock()
		c.watch.running = false
		c.watch.Unlock()
	}()

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.api.WatchFinished(sctx)
	if err != nil {
		return c.watchErr(ctx, err)
	}
	if err := stream.Send(&enginev1.WatchFinishedRequest{Cursor: cursor, MaxBatchBytes: uint32(c.maxReply)}); err != nil {
		_, err = stream.Recv() // the stream's own error
		return c.watchErr(ctx, err)
	}
	var round Finished
	next := cursor // where the next batch must start
	for {
		b, err := stream.Recv()
		if err != nil {
			return c.watchErr(ctx, err)
		}
		// A batch starts where the last ended; it may start later when
		// reports were acknowledged by another reader (GetFinished), never
		// earlier: an earlier start would hand fn a report twice.
		if b.GetCursor() < next || b.GetNext() <= b.GetCursor() || (b.GetCursor() != next && len(round.FinishedSending)+len(round.FinishedRecving)+len(round.Failed)+len(round.InvalidBlocks)+len(round.Quarantined) > 0) {
			return fmt.Errorf("watch finished: the host sent reports [%d, %d) where %d was expected; reconnect", b.GetCursor(), b.GetNext(), next)
		}
		next = b.GetNext()
		round = merge(round, fromProto(b))
		if b.GetMore() {
			continue
		}
		round.More = false
		if err := fn(round); err != nil {
			return err
		}
		round = Finished{}
		c.watch.Lock()
		c.watch.cursor = next
		c.watch.Unlock()
		// A lost acknowledgement costs nothing: the next stream opens at
		// this cursor, which acknowledges it too.
		_ = stream.Send(&enginev1.WatchFinishedRequest{Cursor: next})
	}
}

// watchErr is ctx's error once ctx ended, else err as an *Error.
func (c *Client) watchErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return wrap(err)
}

// merge appends f's lists to into.
func merge(into, f Finished) Finished {
	into.FinishedSending = append(into.FinishedSending, f.FinishedSending...)
	into.FinishedRecving = append(into.FinishedRecving, f.FinishedRecving...)
	into.Failed = append(into.Failed, f.Failed...)
	into.InvalidBlocks = append(into.InvalidBlocks, f.InvalidBlocks...)
	into.Quarantined = append(into.Quarantined, f.Quarantined...)
	return into
}
