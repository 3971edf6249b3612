package host

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	enginev1 "github.com/custody-dev/custody/api/engine/v1"
)

// Every number from outside is range-checked here before anything narrows
// it, multiplies it or adds it to a clock. An engine request out of range
// is refused as INVALID_ARGUMENT naming the field, and changes nothing.

// Ranges of the engine API's numbers.
const (
	// MaxConsumers bounds consumers and producers: one notification per
	// remote rank; far above any tensor-parallel degree, far below int32.
	MaxConsumers = 1 << 16
	// MaxLease bounds lease_ms, so that a lease never overflows a
	// duration or the clock it is added to.
	MaxLease = 24 * time.Hour
	// MaxBlockSize bounds a pool's block size.
	MaxBlockSize = 1 << 32
	// maxFileOffset is the largest byte offset a region file may have.
	maxFileOffset = math.MaxInt64
)

// validateUnary is the engine server's interceptor: it refuses a request
// with a number out of range before the handler converts any.
func validateUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := validateRequest(req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return handler(ctx, req)
}

// MaxNameBytes bounds every name and id from outside: request ids, host,
// peer and pool names, addresses. Longer ones are refused, never logged
// whole.
const MaxNameBytes = 256

// checkName refuses a name or id longer than MaxNameBytes, or with a NUL
// byte, without repeating it.
func checkName(s string) error {
	if len(s) > MaxNameBytes {
		return fmt.Errorf("%d bytes long, more than %d", len(s), MaxNameBytes)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("holds a NUL byte")
	}
	return nil
}

// checkNames checks each field of a request that is a name or id.
func checkNames(what string, fields ...string) error {
	for i := 0; i+1 < len(fields); i += 2 {
		if err := checkName(fields[i+1]); err != nil {
			return fmt.Errorf("%s: %s %w", what, fields[i], err)
		}
	}
	return nil
}

// validateRequest checks the names and numbers of one engine request.
func validateRequest(req any) error {
	switch r := req.(type) {
	case *enginev1.RegisterPoolRequest:
		if err := checkNames("register pool", "name", r.GetName()); err != nil {
			return err
		}
		return checkPoolGeometry(fmt.Sprintf("register pool %q", r.GetName()), "", r.GetOffset(), r.GetBlockSize(), uint64(r.GetBlocks()))
	case *enginev1.ConnectPeerRequest:
		if err := checkNames("connect peer", "name", r.GetName()); err != nil {
			return err
		}
		for i, rk := range r.GetRanks() {
			if err := checkNames(fmt.Sprintf("connect peer %q rank %d", r.GetName(), i), "address", rk.GetAddress(), "pool", rk.GetPool()); err != nil {
				return err
			}
		}
	case *enginev1.RemovePeerRequest:
		return checkNames("remove peer", "name", r.GetName())
	case *enginev1.ReadRequest:
		return checkNames("read request", "request_id", r.GetRequestId(), "peer", r.GetPeer())
	}
	if r, ok := req.(interface {
		GetRequestId() string
		GetPeer() string
	}); ok {
		if err := checkNames("request", "request_id", r.GetRequestId(), "peer", r.GetPeer()); err != nil {
			return err
		}
	}
	switch r := req.(type) {
	case *enginev1.WriteRequest:
		return checkPush("write request", r.GetRequestId(), "consumers", r.GetConsumers(), r.GetLeaseMs())
	case *enginev1.ExpectSendRequest:
		return checkPush("expect send", r.GetRequestId(), "consumers", r.GetConsumers(), r.GetLeaseMs())
	case *enginev1.ExpectReceiveRequest:
		return checkPush("expect receive", r.GetRequestId(), "producers", r.GetProducers(), r.GetLeaseMs())
	}
	return nil
}

// checkPush checks a push's count of notifications and its lease.
func checkPush(what, id, countField string, count uint32, leaseMs uint64) error {
	if count < 1 || count > MaxConsumers {
		return fmt.Errorf("%s %.64q: %s %d out of range: want 1 to %d", what, id, countField, count, MaxConsumers)
	}
	if _, err := LeaseFromMillis(leaseMs); err != nil {
		return fmt.Errorf("%s %.64q: %w", what, id, err)
	}
	return nil
}

// LeaseFromMillis converts lease_ms to a duration, refusing 0 and anything
// above MaxLease (which never overflows).
func LeaseFromMillis(ms uint64) (time.Duration, error) {
	if ms < 1 || ms > uint64(MaxLease/time.Millisecond) {
		return 0, fmt.Errorf("lease_ms %d out of range: want 1 to %d (%v)", ms, uint64(MaxLease/time.Millisecond), MaxLease)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// checkPoolGeometry checks a pool's block size and count, and that the
// range they span from offset fits a file: field prefixes the names of
// the fields in errors ("pools[0]." for the config, "" for the API).
func checkPoolGeometry(what, field string, offset, blockSize, blocks uint64) error {
	switch {
	case blockSize < 1 || blockSize > MaxBlockSize:
		return fmt.Errorf("%s: %sblock_size %d out of range: want 1 to %d", what, field, blockSize, uint64(MaxBlockSize))
	case blocks < 1 || blocks > math.MaxUint32:
		return fmt.Errorf("%s: %sblocks %d out of range: want 1 to %d", what, field, blocks, uint64(math.MaxUint32))
	}
	hi, size := bits.Mul64(blockSize, blocks)
	end, carry := bits.Add64(offset, size, 0)
	if hi != 0 || carry != 0 || end > maxFileOffset {
		return fmt.Errorf("%s: %soffset %d + block_size %d x blocks %d lies beyond the largest file offset %d", what, field, offset, blockSize, blocks, int64(maxFileOffset))
	}
	return nil
}
