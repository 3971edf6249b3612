package host

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	enginev1 "github.com/custody-dev/custody/api/engine/v1"
)

// WatchFinished streams the report log from the engine's cursor: every
// batch as soon as the owner added its round, without waiting for
// acknowledgements, which arrive on the same stream and remove what they
// cover. Nothing is removed by sending: a batch the engine never processed
// (the stream broke, its deadline fired) is sent again on the next stream,
// under the same cursor. The stream ends when the engine closes it, its
// context ends, the host stops, or an acknowledgement names a cursor the
// host never issued (InvalidArgument) or one of another host process
// (Aborted: ErrHostRestarted).
func (s *engineServer) WatchFinished(stream enginev1.Engine_WatchFinishedServer) error {
	first, err := stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	limit, err := s.open(first)
	if err != nil {
		return err
	}
	acks := make(chan error, 1)
	go func() { acks <- s.readAcks(stream, s.h.rep.incarnation()) }()
	return s.sendReports(stream, first.GetCursor(), limit, acks)
}

// StreamFinished is WatchFinished without acknowledgements on the stream:
// they come by AckFinished. It ends as WatchFinished does, but for the
// acknowledgements' reasons.
func (s *engineServer) StreamFinished(first *enginev1.WatchFinishedRequest, stream enginev1.Engine_StreamFinishedServer) error {
	limit, err := s.open(first)
	if err != nil {
		return err
	}
	return s.sendReports(stream, first.GetCursor(), limit, nil)
}

// AckFinished applies one acknowledgement apart from a stream. With no
// stream to take an incarnation from, a nonzero cursor needs one.
func (s *engineServer) AckFinished(_ context.Context, r *enginev1.AckFinishedRequest) (*enginev1.Empty, error) {
	if err := s.h.rep.ack(r.GetIncarnation(), r.GetCursor()); err != nil {
		return nil, engineErr(fmt.Errorf("ack finished: %w", err))
	}
	return &enginev1.Empty{}, nil
}

// open checks a stream's opening message and applies its cursor, which
// acknowledges everything below it if it is this host process's
// (rep.ack checks its incarnation); it returns the batch limit.
func (s *engineServer) open(first *enginev1.WatchFinishedRequest) (int, error) {
	limit, err := batchLimit(first.GetMaxBatchBytes())
	if err != nil {
		return 0, err
	}
	if err := s.h.rep.ack(first.GetIncarnation(), first.GetCursor()); err != nil {
		return 0, engineErr(fmt.Errorf("watch finished: %w", err))
	}
	return limit, nil
}

// sendReports sends the report log from pos, each batch as soon as the
// owner added its round, until the stream's context ends, the host stops,
// or acks (nil: none) yields the acknowledgements' end.
func (s *engineServer) sendReports(stream interface {
	Send(*enginev1.Finished) error
	Context() context.Context
}, pos uint64, limit int, acks <-chan error) error {
	ctx := stream.Context()
	for {
		b, ok, changed := s.h.rep.next(pos, limit)
		if ok {
			if err := stream.Send(finishedProto(b)); err != nil {
				return err
			}
			pos = b.Next
			continue
		}
		select {
		case <-changed:
		case err := <-acks:
			return err
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.h.done:
			return status.Error(codes.Unavailable, ErrClosed.Error())
		}
	}
}

// readAcks applies the engine's acknowledgements until the stream ends: nil
// when the engine closed its side, the error otherwise. An acknowledgement
// without an incarnation is of inc, the one the stream was opened on: a
// stream lives and dies with one host process.
func (s *engineServer) readAcks(stream enginev1.Engine_WatchFinishedServer, inc uint64) error {
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if m.GetMaxBatchBytes() != 0 {
			return status.Error(codes.InvalidArgument, "watch finished: max_batch_bytes is taken from the first message only; later messages carry a cursor alone")
		}
		mi := m.GetIncarnation()
		if mi == 0 {
			mi = inc
		}
		if err := s.h.rep.ack(mi, m.GetCursor()); err != nil {
			return engineErr(fmt.Errorf("watch finished: %w", err))
		}
	}
}

// batchLimit checks the engine's max_batch_bytes: 0 is DefaultBatchBytes,
// less than MinBatchBytes is refused.
func batchLimit(n uint32) (int, error) {
	switch {
	case n == 0:
		return DefaultBatchBytes, nil
	case n < MinBatchBytes:
		return 0, status.Error(codes.InvalidArgument, fmt.Sprintf("watch finished: max_batch_bytes %d is below the least a batch needs, %d", n, MinBatchBytes))
	}
	return int(n), nil
}
