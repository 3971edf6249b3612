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
// is processed: the client remembers the cursor and the host process it
// came from (its incarnation), so the next WatchFinished resumes after it,
// and acknowledges it within the ack delay (WithAckDelay), after which the
// host forgets it.
//
// When the host restarted since, it refuses that cursor (its cursors count
// from 0 again): WatchFinished then forgets the cursor and starts again from
// the new host process's first report, so none of the new host's reports is
// skipped.
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
	c.watch.Unlock()
	defer func() {
		c.watch.Lock()
		c.watch.running = false
		c.watch.Unlock()
	}()
	for {
		restarted, err := c.watchStream(ctx, fn)
		if !restarted {
			return err
		}
		// The host refused a cursor of an earlier host process and
		// watchStream forgot it: the next stream opens at 0, which no
		// host refuses as another's, so this loops at most once.
	}
}

// watchStream runs one WatchFinished stream from the client's cursor.
// restarted: the host refused that cursor as another host process's
// (Aborted) and the client's cursor is reset to 0; open again.
func (c *Client) watchStream(ctx context.Context, fn func(Finished) error) (restarted bool, err error) {
	c.watch.Lock()
	cursor, inc := c.watch.cursor, c.watch.incarnation
	c.watch.Unlock()

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.api.WatchFinished(sctx)
	if err != nil {
		return false, c.watchErr(ctx, err)
	}
	if err := stream.Send(&enginev1.WatchFinishedRequest{Cursor: cursor, Incarnation: inc, MaxBatchBytes: uint32(c.maxReply)}); err != nil {
		_, err = stream.Recv() // the stream's own error
		return c.restarted(ctx, cursor, err)
	}
	acks := c.startAcker(stream)
	// The stream ends before the acker: an acknowledgement blocked in Send
	// (a host that stopped reading) must not keep this call from returning.
	defer func() { cancel(); acks.end() }()
	var round Finished
	next := cursor // where the next batch must start
	for {
		b, err := stream.Recv()
		if err != nil {
			return c.restarted(ctx, cursor, err)
		}
		// Every batch of a stream is of one host process: the one the
		// cursor came from, or, opened at 0, the first batch's (0 from a
		// host older than incarnations, which refuses no cursor).
		if inc == 0 {
			inc = b.GetIncarnation()
		}
		if b.GetIncarnation() != inc {
			return false, fmt.Errorf("watch finished: the host sent reports of incarnation %#x on a stream of incarnation %#x; reconnect", b.GetIncarnation(), inc)
		}
		// A batch starts where the last ended; it may start later when
		// reports were acknowledged by another reader (GetFinished), never
		// earlier: an earlier start would hand fn a report twice.
		if b.GetCursor() < next || b.GetNext() <= b.GetCursor() || (b.GetCursor() != next && len(round.FinishedSending)+len(round.FinishedRecving)+len(round.Failed)+len(round.InvalidBlocks)+len(round.Quarantined) > 0) {
			return false, fmt.Errorf("watch finished: the host sent reports [%d, %d) where %d was expected; reconnect", b.GetCursor(), b.GetNext(), next)
		}
		next = b.GetNext()
		round = merge(round, fromProto(b))
		if b.GetMore() {
			continue
		}
		round.More = false
		if err := fn(round); err != nil {
			return false, err
		}
		round = Finished{}
		c.watch.Lock()
		c.watch.cursor, c.watch.incarnation = next, inc
		c.watch.Unlock()
		acks.processed(next, inc)
	}
}

// restarted handles a stream's error: when the host refused the client's
// cursor as another host process's (ErrHostRestarted), the cursor is reset
// to 0 and restarted says whether opening again may help (it was not 0).
func (c *Client) restarted(ctx context.Context, cursor uint64, err error) (bool, error) {
	err = c.watchErr(ctx, err)
	if !errors.Is(err, ErrHostRestarted) {
		return false, err
	}
	c.watch.Lock()
	c.watch.cursor, c.watch.incarnation = 0, 0
	c.watch.Unlock()
	return cursor != 0, err
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
