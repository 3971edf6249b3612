// Package client is the Go client of custody's engine API, for engines
// written in Go (and for custody's own demo). It speaks api/engine/v1 over
// the host's unix socket.
package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	enginev1 "github.com/custody-dev/custody/api/engine/v1"
)

// Client is a connection to one custody host. It is safe for concurrent use.
// Its errors are *Error values: match them with errors.Is against ErrUnavailable
// and the other sentinels.
type Client struct {
	conn     *grpc.ClientConn
	api      enginev1.EngineClient
	maxReply int
	ackDelay time.Duration
	// ackAfter, when set (tests), stands in for the ack delay's timer;
	// ackNoted, when set, hears each cursor processed once it is recorded;
	// ackSend, when set, stands in for the stream's Send of an
	// acknowledgement.
	ackAfter func(time.Duration) (<-chan time.Time, func() bool)
	ackNoted func(cursor uint64)
	ackSend  func(enginev1.Engine_WatchFinishedClient, *enginev1.WatchFinishedRequest) error

	// watch is WatchFinished's state: the cursor below which every report
	// was processed, the host process it is of (its incarnation, 0 while
	// the client has none), and whether a watch runs.
	watch struct {
		sync.Mutex
		cursor      uint64
		incarnation uint64
		running     bool
	}
}

// Option configures Dial.
type Option func(*Client)

// WithMaxReply bounds the replies the client accepts, in bytes (gRPC's
// receive limit, 4 MiB by default); WatchFinished asks the host for batches
// that fit. At least 16384.
func WithMaxReply(n int) Option { return func(c *Client) { c.maxReply = n } }

// window is the HTTP/2 flow-control window of the client's side, per
// stream and per connection. Setting it turns gRPC's bandwidth-delay
// estimator off: the estimator pings the host after each burst of data the
// client receives, and on the engine socket, where nearly every message is
// small, that ping and its acknowledgement add two frames, and their writes
// and wake-ups, to each call. 1 MiB holds a whole batch of reports.
const window = 1 << 20

// DialOptions are the gRPC options Dial connects with (before WithMaxReply's
// limit), for a caller that measures gRPC as the engine API runs it.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(window),
		grpc.WithInitialConnWindowSize(window),
	}
}

// Dial connects to the host's engine socket. The connection is made lazily;
// the first call reports a host that is not there.
func Dial(socket string, opts ...Option) (*Client, error) {
	c := &Client{ackDelay: DefaultAckDelay}
	for _, o := range opts {
		o(c)
	}
	if c.ackDelay < 0 || c.ackDelay > maxAckDelay {
		return nil, fmt.Errorf("engine socket %s: ack delay %v: want 0 to %v", socket, c.ackDelay, maxAckDelay)
	}
	dopts := DialOptions()
	if c.maxReply != 0 {
		if c.maxReply < minReply || c.maxReply > maxReply {
			return nil, fmt.Errorf("engine socket %s: max reply %d bytes: want %d to %d", socket, c.maxReply, minReply, maxReply)
		}
		dopts = append(dopts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.maxReply)))
	}
	conn, err := grpc.NewClient("unix://"+socket, dopts...)
	if err != nil {
		return nil, fmt.Errorf("engine socket %s: %w", socket, err)
	}
	c.conn, c.api = conn, enginev1.NewEngineClient(conn)
	return c, nil
}

// Bounds of WithMaxReply: the host's least batch and what a uint32 holds.
const (
	minReply = 16 << 10
	maxReply = 1<<31 - 1
)

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Part moves Local blocks of a local pool to or from as many Remote blocks of
// remote rank Rank; each part is one transfer.
type Part struct {
	Pool   uint32
	Local  []uint32
	Rank   uint32
	Remote []uint32
}

// RemoteRank is one rank of a peer: its host's metadata address (or the name
// of a peer in the host's config) and the pool remote block ids index.
type RemoteRank struct {
	Address string
	Pool    string
}

// Failure is a failed request and why.
type Failure struct {
	Request string
	Sending bool
	Reason  string
}

// BlockRef names a block of a pool.
type BlockRef struct {
	Pool, Block uint32
}

// Finished is a finished report (vLLM's get_finished). A failed receive is
// in FinishedRecving and Failed, its blocks in InvalidBlocks. Quarantined
// blocks must never be used again.
type Finished struct {
	FinishedSending []string
	FinishedRecving []string
	Failed          []Failure
	InvalidBlocks   []BlockRef
	Quarantined     []BlockRef
	// More (GetFinished only): the reply ended inside a round too large for
	// one reply; the round's rest, a failed receive's invalid blocks among
	// it, comes with the next call.
	More bool
}

// RegisterPool registers blocks equal blocks of blockSize bytes at offset of
// the region file at path.
func (c *Client) RegisterPool(ctx context.Context, name, path string, offset, blockSize uint64, blocks uint32) (uint32, error) {
	r, err := c.api.RegisterPool(ctx, &enginev1.RegisterPoolRequest{Name: name, Path: path, Offset: offset, BlockSize: blockSize, Blocks: blocks})
	if err != nil {
		return 0, wrap(err)
	}
	return r.GetPool(), nil
}

// Alloc takes n free blocks of a pool.
func (c *Client) Alloc(ctx context.Context, pool uint32, n int) ([]uint32, error) {
	r, err := c.api.Alloc(ctx, &enginev1.AllocRequest{Pool: pool, Count: uint32(n)})
	if err != nil {
		return nil, wrap(err)
	}
	return r.GetBlocks(), nil
}

// Free gives blocks back to the pool.
func (c *Client) Free(ctx context.Context, pool uint32, blocks []uint32) error {
	_, err := c.api.Free(ctx, &enginev1.FreeRequest{Pool: pool, Blocks: blocks})
	return wrap(err)
}

// ConnectPeer tells the host how to reach a peer's ranks.
func (c *Client) ConnectPeer(ctx context.Context, name string, ranks ...RemoteRank) error {
	rs := make([]*enginev1.RemoteRank, len(ranks))
	for i, r := range ranks {
		rs[i] = &enginev1.RemoteRank{Address: r.Address, Pool: r.Pool}
	}
	_, err := c.api.ConnectPeer(ctx, &enginev1.ConnectPeerRequest{Name: name, Ranks: rs})
	return wrap(err)
}

// RemovePeer retires a peer.
func (c *Client) RemovePeer(ctx context.Context, name string) error {
	_, err := c.api.RemovePeer(ctx, &enginev1.RemovePeerRequest{Name: name})
	return wrap(err)
}

func toParts(ps []Part) []*enginev1.Part {
	out := make([]*enginev1.Part, len(ps))
	for i, p := range ps {
		out[i] = &enginev1.Part{Pool: p.Pool, Local: p.Local, Rank: p.Rank, Remote: p.Remote}
	}
	return out
}

// NewToken draws a request's notification token: 64 random bits, never
// zero. Draw one per request and pass it, with the request id, to both
// sides (ExpectSend and Read, or ExpectReceive and Write): notifications
// count only for the registration with their token, so a late one of an
// earlier request under the same id counts for nothing.
func NewToken() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
		if t := binary.LittleEndian.Uint64(b[:]); t != 0 {
			return t
		}
	}
}

// Read pulls a request's blocks from a peer; notifyProducer tells the
// producer once every part is done, with token (the one its ExpectSend was
// given).
func (c *Client) Read(ctx context.Context, request string, token uint64, peer string, notifyProducer bool, parts ...Part) error {
	_, err := c.api.Read(ctx, &enginev1.ReadRequest{RequestId: request, Token: token, Peer: peer, Parts: toParts(parts), NotifyProducer: notifyProducer})
	return wrap(err)
}

// Write pushes a request's blocks to a peer; it finishes once consumers
// consumed notifications with token (the one the consumer's ExpectReceive
// was given) arrived or the lease expired.
func (c *Client) Write(ctx context.Context, request string, token uint64, peer string, consumers int, lease time.Duration, parts ...Part) error {
	_, err := c.api.Write(ctx, &enginev1.WriteRequest{RequestId: request, Token: token, Peer: peer, Parts: toParts(parts), Consumers: uint32(consumers), LeaseMs: uint64(lease.Milliseconds())})
	return wrap(err)
}

// ExpectSend pins blocks that consumers will read, until consumers consumed
// notifications with token arrived or the lease expired.
func (c *Client) ExpectSend(ctx context.Context, request string, token uint64, peer string, pool uint32, blocks []uint32, consumers int, lease time.Duration) error {
	_, err := c.api.ExpectSend(ctx, &enginev1.ExpectSendRequest{RequestId: request, Token: token, Peer: peer, Pool: pool, Blocks: blocks, Consumers: uint32(consumers), LeaseMs: uint64(lease.Milliseconds())})
	return wrap(err)
}

// ExpectReceive pins blocks a peer will push into until producers written
// notifications with token arrived or the lease expired. It fails with
// Unavailable while the peer's handshake runs: retry.
func (c *Client) ExpectReceive(ctx context.Context, request string, token uint64, peer string, pool uint32, blocks []uint32, producers int, lease time.Duration) error {
	_, err := c.api.ExpectReceive(ctx, &enginev1.ExpectReceiveRequest{RequestId: request, Token: token, Peer: peer, Pool: pool, Blocks: blocks, Producers: uint32(producers), LeaseMs: uint64(lease.Milliseconds())})
	return wrap(err)
}

// GetFinished takes what finished since the last call; the host forgets it
// as it answers, so a reply that is lost is lost. Engines should use
// WatchFinished. More is set when a round too large for one reply goes on in
// the next call.
func (c *Client) GetFinished(ctx context.Context) (Finished, error) {
	r, err := c.api.GetFinished(ctx, &enginev1.GetFinishedRequest{})
	if err != nil {
		return Finished{}, wrap(err)
	}
	return fromProto(r), nil
}

func fromProto(r *enginev1.Finished) Finished {
	f := Finished{FinishedSending: r.GetFinishedSending(), FinishedRecving: r.GetFinishedRecving(), More: r.GetMore()}
	for _, x := range r.GetFailed() {
		f.Failed = append(f.Failed, Failure{Request: x.GetRequestId(), Sending: x.GetSending(), Reason: x.GetReason()})
	}
	for _, b := range r.GetInvalidBlocks() {
		f.InvalidBlocks = append(f.InvalidBlocks, BlockRef{Pool: b.GetPool(), Block: b.GetBlock()})
	}
	for _, b := range r.GetQuarantined() {
		f.Quarantined = append(f.Quarantined, BlockRef{Pool: b.GetPool(), Block: b.GetBlock()})
	}
	return f
}

// Status is the host's status.
func (c *Client) Status(ctx context.Context) (*enginev1.StatusResponse, error) {
	r, err := c.api.Status(ctx, &enginev1.StatusRequest{})
	return r, wrap(err)
}
