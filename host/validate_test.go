package host

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	enginev1 "github.com/custody-dev/custody/api/engine/v1"
)

const maxLeaseMs = uint64(MaxLease / 1_000_000)

// TestEngineAPIRangeChecksEveryNumber sends each numeric field of the
// engine API at its boundaries, and at the values that used to wrap,
// straight over gRPC (the Go client would narrow some itself). A value in
// range is accepted (or, for a peer that is not connected, refused for
// that, after the range checks); one out of range is INVALID_ARGUMENT
// naming the field, and changes nothing: the same request id is then
// accepted with good values.
func TestEngineAPIRangeChecksEveryNumber(t *testing.T) {
	th := startHost(t, "numbers", 64, nil)
	conn, err := grpc.NewClient("unix://"+th.cfg.Engine.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	api := enginev1.NewEngineClient(conn)
	blocks, err := th.c.Alloc(th.ctx(), th.poolID, 1)
	require.NoError(t, err)

	fresh := func() []uint32 { // a send pins its block: each gets its own
		b, err := th.c.Alloc(th.ctx(), th.poolID, 1)
		require.NoError(t, err)
		return b
	}
	n := 0
	send := func(consumers uint32, leaseMs uint64) (string, error) {
		n++
		id := fmt.Sprintf("s%d", n)
		_, err := api.ExpectSend(th.ctx(), &enginev1.ExpectSendRequest{RequestId: id, Token: 1, Pool: th.poolID, Blocks: fresh(), Consumers: consumers, LeaseMs: leaseMs})
		return id, err
	}
	write := func(consumers uint32, leaseMs uint64) (string, error) {
		n++
		id := fmt.Sprintf("w%d", n)
		_, err := api.Write(th.ctx(), &enginev1.WriteRequest{RequestId: id, Token: 1, Peer: "nobody", Consumers: consumers, LeaseMs: leaseMs,
			Parts: []*enginev1.Part{{Pool: th.poolID, Local: blocks, Remote: []uint32{0}}}})
		return id, err
	}
	recv := func(producers uint32, leaseMs uint64) (string, error) {
		n++
		id := fmt.Sprintf("r%d", n)
		_, err := api.ExpectReceive(th.ctx(), &enginev1.ExpectReceiveRequest{RequestId: id, Token: 1, Peer: "nobody", Pool: th.poolID, Blocks: blocks, Producers: producers, LeaseMs: leaseMs})
		return id, err
	}
	pool := func(offset, blockSize uint64, count uint32) (string, error) {
		n++
		id := fmt.Sprintf("p%d", n)
		_, err := api.RegisterPool(th.ctx(), &enginev1.RegisterPoolRequest{Name: id, Path: th.pool, Offset: offset, BlockSize: blockSize, Blocks: count})
		return id, err
	}
	type call func(a uint64, b uint64) (string, error)
	counted := func(f func(uint32, uint64) (string, error), lease bool) call {
		if lease {
			return func(v, _ uint64) (string, error) { return f(1, v) }
		}
		return func(v, _ uint64) (string, error) { return f(uint32(v), 1000) }
	}
	cases := []struct {
		name  string
		call  call
		value uint64
		ok    bool   // in range
		field string // named when refused
	}{}
	for _, c := range []struct {
		name  string
		f     func(uint32, uint64) (string, error)
		field string
	}{{"expect send", send, "consumers"}, {"write", write, "consumers"}, {"expect receive", recv, "producers"}} {
		for _, v := range []struct {
			v  uint64
			ok bool
		}{{0, false}, {1, true}, {MaxConsumers, true}, {MaxConsumers + 1, false}, {1 << 31, false}, {math.MaxUint32, false}} {
			cases = append(cases, struct {
				name  string
				call  call
				value uint64
				ok    bool
				field string
			}{fmt.Sprintf("%s %s=%d", c.name, c.field, v.v), counted(c.f, false), v.v, v.ok, c.field})
		}
		for _, v := range []struct {
			v  uint64
			ok bool
		}{{0, false}, {1, true}, {maxLeaseMs, true}, {maxLeaseMs + 1, false}, {math.MaxInt64 / 1_000_000, false}, {math.MaxUint64 / 1_000_000, false}, {math.MaxUint64, false}} {
			cases = append(cases, struct {
				name  string
				call  call
				value uint64
				ok    bool
				field string
			}{fmt.Sprintf("%s lease_ms=%d", c.name, v.v), counted(c.f, true), v.v, v.ok, "lease_ms"})
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id, err := c.call(c.value, 0)
			if c.ok {
				if strings.HasPrefix(id, "s") {
					require.NoError(t, err, "in range, refused")
				} else { // no peer "nobody": refused for that, past the range checks
					assert.NotContains(t, status.Convert(err).Message(), "out of range")
					assert.Contains(t, status.Convert(err).Message(), `peer "nobody"`)
				}
				return
			}
			require.Equal(t, codes.InvalidArgument, status.Code(err), "out of range, not refused: %v", err)
			assert.Contains(t, status.Convert(err).Message(), c.field)
			assert.NotContains(t, status.Convert(err).Message(), "-", "a wrapped, negative number in the message")
			if strings.HasPrefix(id, "s") { // nothing was recorded: the id is free
				_, err := api.ExpectSend(th.ctx(), &enginev1.ExpectSendRequest{RequestId: id, Token: 1, Pool: th.poolID, Blocks: fresh(), Consumers: 1, LeaseMs: 1000})
				assert.NoError(t, err, "request %s after its refusal", id)
			}
		})
	}

	// A pool's geometry: block size, block count and the range from offset.
	for _, c := range []struct {
		name                 string
		offset, bs           uint64
		blocks               uint32
		field                string
		inRange, registrable bool
	}{
		{"block_size 0", 0, 0, 1, "block_size", false, false},
		{"block_size max+1", 0, MaxBlockSize + 1, 1, "block_size", false, false},
		{"blocks 0", 0, testBlockSize, 0, "blocks", false, false},
		{"blocks 2^32-1 of the largest blocks overflow a file", 0, MaxBlockSize, math.MaxUint32, "offset", false, false},
		{"offset 2^64-1", math.MaxUint64, 1, 1, "offset", false, false},
		{"offset wraps with the size", math.MaxUint64 - testBlockSize + 1, testBlockSize, 1, "offset", false, false},
		{"a pool that fits the file", 0, testBlockSize, 16, "", true, true},
	} {
		t.Run("register pool "+c.name, func(t *testing.T) {
			_, err := pool(c.offset, c.bs, c.blocks)
			if c.registrable {
				require.NoError(t, err)
				return
			}
			require.Equal(t, codes.InvalidArgument, status.Code(err), "out of range, not refused: %v", err)
			assert.Contains(t, status.Convert(err).Message(), c.field)
		})
	}
}

// TestConfigRangeChecksEveryNumber: the config's numbers at their
// boundaries; out of range is an error naming the field, never truncated.
func TestConfigRangeChecksEveryNumber(t *testing.T) {
	base := "name: a\nengine: {socket: /s}\n"
	pool := func(bs, blocks uint64) string {
		return base + fmt.Sprintf("pools: [{name: p, path: /x, block_size: %d, blocks: %d}]\n", bs, blocks)
	}
	for _, c := range []struct {
		name, yaml, field string // field empty: valid
	}{
		{"blocks 1", pool(1, 1), ""},
		{"blocks 2^32-1", pool(1, math.MaxUint32), ""},
		{"blocks 2^32", pool(1, 1<<32), "pools[0].blocks"},
		{"blocks 2^32+8 (was truncated to 8)", pool(1, 1<<32+8), "pools[0].blocks"},
		{"blocks 2^64-1", pool(1, math.MaxUint64), "pools[0].blocks"},
		{"block_size max", pool(MaxBlockSize, 1), ""},
		{"block_size max+1", pool(MaxBlockSize+1, 1), "pools[0].block_size"},
		{"size overflows a file", pool(MaxBlockSize, math.MaxUint32), "pools[0].offset"},
		{"call_timeout max", base + "transport: {name: fake, call_timeout: 10m}", ""},
		{"call_timeout max+1ns", base + "transport: {name: fake, call_timeout: 10m0.000000001s}", "transport.call_timeout"},
		{"call_timeout negative", base + "transport: {name: fake, call_timeout: -1s}", "transport.call_timeout"},
		{"call_timeout beyond int64", base + "transport: {name: fake, call_timeout: 9999999999h}", "transport.call_timeout"},
		{"blocks beyond uint64", base + "transport: {name: fake}\npools: [{name: p, path: /x, block_size: 1, blocks: 18446744073709551616}]", "pools[0].blocks"},
		{"cap max", base + "escalation: {cap: 24h}", ""},
		{"cap max+1ns", base + "escalation: {cap: 24h0m0.000000001s}", "escalation.cap"},
		{"cap negative", base + "escalation: {cap: -1s}", "escalation.cap"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(c.yaml, "transport:") {
				c.yaml += "\ntransport: {name: fake}\n"
			}
			_, err := ParseConfig([]byte(c.yaml))
			if c.field == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.field)
		})
	}
}

// TestPeerInfoRangeChecksEveryNumber: a peer's pool geometry is checked
// before its block count is narrowed.
func TestPeerInfoRangeChecksEveryNumber(t *testing.T) {
	pi := func(bs, blocks uint64) PeerInfo {
		return PeerInfo{Name: "p", Compat: "c", Pools: []PoolLayout{{Name: "kv", BlockSize: bs, Blocks: blocks}}}
	}
	require.NoError(t, pi(1, math.MaxUint32).validate())
	assert.ErrorContains(t, pi(1, 1<<32+8).validate(), "pools[0].blocks")
	assert.ErrorContains(t, pi(0, 1).validate(), "pools[0].block_size")
	assert.ErrorContains(t, pi(MaxBlockSize+1, 1).validate(), "pools[0].block_size")
	many := PeerInfo{Name: "p", Compat: "c", Pools: make([]PoolLayout, maxPeerPools+1)}
	assert.ErrorContains(t, many.validate(), "pools exceed")
}
