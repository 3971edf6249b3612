package core

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// benchTransport is a stand-in transport for benchmarks only: it answers at
// once and holds nothing per handle, so a benchmark measures core, not a
// model of a transport. (core's tests use the scripted double, double_test.go;
// host/coreonfake runs core over the real fake.)
type benchTransport struct {
	next   uint64
	events []sdk.Event
	errs   []error
	noEvts bool
}

var _ sdk.EventSource = (*benchTransport)(nil)

func (b *benchTransport) id() uint64 { b.next++; return b.next }

func (b *benchTransport) Describe(context.Context) (sdk.Description, error) {
	return sdk.Description{Capabilities: sdk.Capabilities{Events: !b.noEvts}}, nil
}
func (b *benchTransport) Open(context.Context, sdk.OpenRequest) error { return nil }
func (b *benchTransport) Close(context.Context) error                 { return nil }
func (b *benchTransport) RegisterMemory(_ context.Context, r []sdk.Region) ([]sdk.Registration, error) {
	out := make([]sdk.Registration, len(r))
	for i := range out {
		out[i].ID = sdk.RegionID(b.id())
	}
	return out, nil
}
func (b *benchTransport) DeregisterMemory(_ context.Context, ids []sdk.RegionID) ([]error, error) {
	return make([]error, len(ids)), nil
}
func (b *benchTransport) LocalMetadata(context.Context) ([]byte, error) { return []byte("x"), nil }
func (b *benchTransport) LoadPeers(_ context.Context, p []sdk.PeerSpec) ([]sdk.PeerResult, error) {
	out := make([]sdk.PeerResult, len(p))
	for i := range out {
		out[i].ID = sdk.PeerID(b.id())
	}
	return out, nil
}
func (b *benchTransport) UnloadPeers(_ context.Context, ids []sdk.PeerID) ([]error, error) {
	return make([]error, len(ids)), nil
}
func (b *benchTransport) PrepareDescriptors(_ context.Context, l []sdk.DlistSpec) ([]sdk.DlistResult, error) {
	out := make([]sdk.DlistResult, len(l))
	for i := range out {
		out[i].ID = sdk.DlistID(b.id())
	}
	return out, nil
}
func (b *benchTransport) ReleaseDescriptors(_ context.Context, ids []sdk.DlistID) ([]error, error) {
	return make([]error, len(ids)), nil
}
func (b *benchTransport) Post(_ context.Context, p []sdk.PostSpec) ([]sdk.PostResult, error) {
	out := make([]sdk.PostResult, len(p))
	for i := range out {
		out[i].ID = sdk.HandleID(b.id())
	}
	return out, nil
}
func (b *benchTransport) Poll(_ context.Context, ids []sdk.HandleID) ([]sdk.HandleStatus, error) {
	out := make([]sdk.HandleStatus, len(ids))
	for i := range out {
		out[i].State = sdk.StateInProgress
	}
	return out, nil
}
func (b *benchTransport) Cancel(_ context.Context, ids []sdk.HandleID) ([]error, error) {
	return make([]error, len(ids)), nil
}
func (b *benchTransport) Release(_ context.Context, ids []sdk.HandleID) ([]error, error) {
	if cap(b.errs) < len(ids) {
		b.errs = make([]error, len(ids))
	}
	return b.errs[:len(ids)], nil
}
func (b *benchTransport) SendNotifications(_ context.Context, m []sdk.OutboundNotification) ([]error, error) {
	return make([]error, len(m)), nil
}
func (b *benchTransport) Notifications(context.Context, int) ([]sdk.Notification, error) {
	return nil, nil
}
func (b *benchTransport) Resources(context.Context) (sdk.Resources, error) {
	return sdk.Resources{}, nil
}
func (b *benchTransport) Events(context.Context, int) ([]sdk.Event, error) {
	ev := b.events
	b.events = b.events[len(b.events):]
	return ev, nil
}

// benchCore is a Core over a benchTransport with one pool of blocks blocks
// and one connected peer of one rank.
func benchCore(tb testing.TB, blocks int, events bool) (*Core, *benchTransport, PoolID) {
	ctx := context.Background()
	tr := &benchTransport{noEvts: !events}
	c, err := New(Config{})
	if err != nil {
		tb.Fatal(err)
	}
	desc, _ := tr.Describe(ctx)
	if err := c.Attach(1, desc, true); err != nil {
		tb.Fatal(err)
	}
	pool, err := c.RegisterPool(PoolSpec{Path: "bench", BlockSize: 64, Blocks: uint32(blocks)})
	if err != nil {
		tb.Fatal(err)
	}
	drive(ctx, c, one(tr), c.Ready())
	if err := c.ConnectPeer(PeerSpec{Name: "p", Ranks: []RankSpec{{Agent: "a", Metadata: []byte("m"), BlockSize: 64, Blocks: uint32(blocks)}}}); err != nil {
		tb.Fatal(err)
	}
	drive(ctx, c, one(tr), c.Ready())
	return c, tr, pool
}

// read issues a one-block, one-part read of block b and returns its handle.
func benchRead(tb testing.TB, c *Core, tr *benchTransport, pool PoolID, id RequestID, b uint32, now time.Time) sdk.HandleID {
	if err := c.Read(now, ReadSpec{Request: id, Token: tok(id), Peer: "p", Parts: []Part{{Pool: pool, Local: []uint32{b}, Remote: []uint32{b}}}}); err != nil {
		tb.Fatal(err)
	}
	drive(context.Background(), c, one(tr), c.Ready())
	return sdk.HandleID(tr.next)
}

// BenchmarkPollRound measures one Poll round in which 100 handles turn DONE,
// are released and their reads reported, while inflight handles are in
// flight (100 new reads take their place between rounds, off the clock):
// with an EventSource its cost must follow the 100 changes, not inflight.
func BenchmarkPollRound(b *testing.B) {
	const changes = 100
	for _, inflight := range []int{1000, 100000} {
		b.Run("inflight="+strconv.Itoa(inflight), func(b *testing.B) {
			ctx := context.Background()
			c, tr, pool := benchCore(b, inflight, true)
			blocks, err := c.Alloc(pool, inflight)
			if err != nil {
				b.Fatal(err)
			}
			now := t0
			handles := make([]sdk.HandleID, inflight)
			slot := make([]uint32, inflight)
			n := 0
			for i := range handles {
				slot[i] = blocks[i]
				handles[i] = benchRead(b, c, tr, pool, RequestID("r"+strconv.Itoa(n)), blocks[i], now)
				n++
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				now = now.Add(time.Millisecond)
				base := (i * changes) % inflight
				for k := 0; k < changes; k++ {
					tr.events = append(tr.events, sdk.Event{Handle: handles[base+k], State: sdk.StateDone})
				}
				rd := drive(ctx, c, one(tr), c.Poll(now))
				if len(rd.FinishedReceiving) != changes {
					b.Fatalf("round finished %d reads, want %d", len(rd.FinishedReceiving), changes)
				}
				b.StopTimer()
				for k := 0; k < changes; k++ {
					handles[base+k] = benchRead(b, c, tr, pool, RequestID("r"+strconv.Itoa(n)), slot[base+k], now)
					n++
				}
				b.StartTimer()
			}
		})
	}
}

// BenchmarkTrackedHandle reports the heap core holds per tracked in-flight
// handle, after a round, with one-block, one-part reads: the worst case per
// handle, since every request-level cost falls on its one handle. The
// request ids are the caller's and are not counted.
func BenchmarkTrackedHandle(b *testing.B) {
	const handles = 100000
	ids := make([]RequestID, handles)
	for i := range ids {
		ids[i] = RequestID(fmt.Sprintf("req-%07d", i))
	}
	var perHandle float64
	for i := 0; i < b.N; i++ {
		c, tr, pool := benchCore(b, handles, true)
		blocks, _ := c.Alloc(pool, handles)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for k := 0; k < handles; k++ {
			benchRead(b, c, tr, pool, ids[k], blocks[k], t0)
		}
		drive(context.Background(), c, one(tr), c.Poll(t0)) // the steady state: a round has run
		runtime.GC()
		runtime.ReadMemStats(&after)
		perHandle = float64(after.HeapAlloc-before.HeapAlloc) / handles
		runtime.KeepAlive(c)
	}
	b.ReportMetric(perHandle, "B/handle")
}
