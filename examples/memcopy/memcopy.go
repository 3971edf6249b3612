// Package memcopy is an example custody transport, the template to copy
// when writing a new one. It moves bytes with memcpy between region files
// that both agents map (so its agents must share a host) and sends
// notifications as datagrams over a unix socket per agent.
//
// It writes only its backend: package sdk/kit checks every argument and
// keeps the contract's bookkeeping (ids, tables, BUSY pins, handle states,
// events, the notification inbox, the Open/Close gate). New wraps the
// backend in a kit.Transport, which implements sdk.Transport.
//
// What it promises (Describe): remote and local transfers, notifications,
// events; Cancel stops a transfer before its next chunk (CancelStops);
// a peer whose process died is noticed before the next chunk, and its
// transfers end FAILED with REMOTE_DISCONNECT (PeerLossReported); killing
// this process stops the transfers it started, but not a peer's copy into
// our memory, which the peer maps directly (FenceInitiated).
package memcopy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/kit"
)

// chunk is how many bytes a transfer copies between two checks for
// Cancel and for its peer's death.
const chunk = 1 << 20

// New returns a memcopy agent that is not open yet.
func New() *kit.Transport[*kit.Mapping, *peer] { return kit.New(&backend{}) }

// backend is one agent's native state. R is a region's mapped bytes, P a
// loaded peer.
type backend struct {
	name   string
	conn   *net.UnixConn // our notification socket
	report kit.Reporter
	wg     sync.WaitGroup // the receiver and every running copy
}

// peer is a loaded peer: its process (to notice its death), its socket
// and its regions, mapped here.
type peer struct {
	pidfd   int
	addr    *net.UnixAddr
	regions map[sdk.RegionID]*kit.Mapping
}

// metadata is what a peer needs to reach this agent.
type metadata struct {
	Agent   string       `json:"agent"`
	PID     int          `json:"pid"`
	Socket  string       `json:"socket"`
	Regions []metaRegion `json:"regions"`
}

type metaRegion struct {
	ID     sdk.RegionID `json:"id"`
	Path   string       `json:"path"`
	Offset uint64       `json:"offset"`
	Length uint64       `json:"length"`
}

func (b *backend) Describe() sdk.Description {
	return sdk.Description{
		Name:         "memcopy",
		Version:      "0.1.0",
		MemoryKinds:  []sdk.MemoryKind{sdk.MemoryHost},
		Capabilities: sdk.Capabilities{Remote: true, Local: true, Notifications: true, Cancel: true, Events: true},
		CancelEffect: sdk.CancelStops,
		PeerLoss:     sdk.PeerLossReported,
		FenceScope:   sdk.FenceInitiated,
		Limits: sdk.Limits{
			MaxDescriptorsPerList: 1 << 16,
			MaxDescriptorsPerPost: 1 << 16,
			MaxItemsPerCall:       1 << 16,
			MaxNotificationBytes:  4096,
			MaxMetadataBytes:      1 << 20,
			PeerLossBoundMillis:   1000,
		},
	}
}

// Open binds the agent's notification socket, in the abstract namespace
// (no file; it dies with the process), and starts its receiver.
func (b *backend) Open(agent string, params map[string]string, r kit.Reporter) error {
	for k := range params {
		return sdk.Errorf(sdk.CodeInvalidArgument, "memcopy: Open: unknown parameter %q; memcopy takes none", k)
	}
	name := fmt.Sprintf("@custody-memcopy/%d/%016x", os.Getpid(), rand.Uint64())
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return sdk.Errorf(sdk.CodeBackend, "memcopy: Open: notification socket: %v", err)
	}
	b.name, b.conn, b.report = agent, conn, r
	b.wg.Add(1)
	go b.receive()
	return nil
}

// Close stops the receiver and waits for every copy to return.
func (b *backend) Close() error {
	b.conn.Close()
	b.wg.Wait()
	return nil
}

// receive hands each datagram (sender name length, name, message) to the
// kit until the socket closes.
func (b *backend) receive() {
	defer b.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, _, err := b.conn.ReadFromUnix(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil || n < 1 || n < 1+int(buf[0]) {
			continue
		}
		k := 1 + int(buf[0])
		b.report.Deliver(string(buf[1:k]), append([]byte(nil), buf[k:n]...))
	}
}

func (b *backend) Register(spec sdk.Region) (*kit.Mapping, error) {
	return kit.MapFile(spec.Path, spec.Offset, spec.Length)
}

func (b *backend) Deregister(r *kit.Region[*kit.Mapping]) error { return r.Value.Unmap() }

func (b *backend) Metadata(agent string, regions []*kit.Region[*kit.Mapping]) ([]byte, error) {
	md := metadata{Agent: agent, PID: os.Getpid(), Socket: b.conn.LocalAddr().String(), Regions: []metaRegion{}}
	for _, r := range regions {
		md.Regions = append(md.Regions, metaRegion{r.ID, r.Spec.Path, r.Spec.Offset, r.Spec.Length})
	}
	return json.Marshal(md)
}

// LoadPeer maps the peer's region files and opens a pidfd of its process.
func (b *backend) LoadPeer(name string, blob []byte) (kit.Loaded[*peer], error) {
	var md metadata
	if err := json.Unmarshal(blob, &md); err != nil || md.Agent != name || md.Socket == "" || md.PID <= 0 {
		return kit.Loaded[*peer]{}, sdk.Errorf(sdk.CodeInvalidArgument, "memcopy: LoadPeers %q: not memcopy metadata of that agent (%v); pass the blob its LocalMetadata returned", name, err)
	}
	fd, err := unix.PidfdOpen(md.PID, 0)
	if err != nil {
		return kit.Loaded[*peer]{}, sdk.Errorf(sdk.CodeRemoteDisconnect, "memcopy: LoadPeers %q: process %d: %v; fetch fresh metadata", name, md.PID, err)
	}
	p := &peer{pidfd: fd, addr: &net.UnixAddr{Name: md.Socket, Net: "unixgram"}, regions: map[sdk.RegionID]*kit.Mapping{}}
	lengths := map[sdk.RegionID]uint64{}
	for _, r := range md.Regions {
		m, err := kit.MapFile(r.Path, r.Offset, r.Length)
		if err != nil {
			b.drop(p)
			return kit.Loaded[*peer]{}, sdk.Errorf(sdk.CodeBackend, "memcopy: LoadPeers %q: region %d: %v; peers must share a host", name, r.ID, err)
		}
		p.regions[r.ID], lengths[r.ID] = m, r.Length
	}
	return kit.Loaded[*peer]{Value: p, Regions: lengths}, nil
}

func (b *backend) UnloadPeer(p *kit.Peer[*peer]) error {
	b.drop(p.Value)
	return nil
}

func (b *backend) drop(p *peer) {
	for _, m := range p.regions {
		_ = m.Unmap()
	}
	unix.Close(p.pidfd)
}

// alive reports whether the peer's process has not exited.
func (p *peer) alive() bool {
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}, 0)
		if err != unix.EINTR {
			return err == nil && n == 0
		}
	}
}

// Start copies the transfer on a goroutine of its own, chunk by chunk.
func (b *backend) Start(x *kit.Transfer[*kit.Mapping, *peer]) (func(), error) {
	p := x.Remote.Peer
	if !p.Value.alive() {
		return nil, sdk.Errorf(sdk.CodeRemoteDisconnect, "memcopy: Post: peer %s has exited; nothing posted, unload it", p.Name)
	}
	var canceled atomic.Bool
	b.wg.Add(1)
	go b.copy(x, &canceled)
	return func() { canceled.Store(true) }, nil
}

// copy moves x's bytes, then sends its notification and reports DONE;
// it stops early when canceled or when the peer dies.
func (b *backend) copy(x *kit.Transfer[*kit.Mapping, *peer], canceled *atomic.Bool) {
	defer b.wg.Done()
	p := x.Remote.Peer
	for _, pair := range x.Pairs {
		local := pair.Region.Value.Bytes[pair.Local.Offset:][:pair.Local.Length]
		remote := p.Value.regions[pair.Remote.Region].Bytes[pair.Remote.Offset:][:pair.Remote.Length]
		dst, src := remote, local
		if x.Op == sdk.OpRead {
			dst, src = local, remote
		}
		for off := 0; off < len(dst); off += chunk {
			if canceled.Load() {
				b.report.Complete(x.ID, sdk.StateCanceled, sdk.Errorf(sdk.CodeCanceled, "memcopy: handle %d canceled", x.ID))
				return
			}
			if !p.Value.alive() {
				b.report.Complete(x.ID, sdk.StateFailed, sdk.Errorf(sdk.CodeRemoteDisconnect, "memcopy: handle %d: peer %s exited", x.ID, p.Name))
				return
			}
			copy(dst[off:min(off+chunk, len(dst))], src[off:])
		}
	}
	if x.Notification != nil {
		if err := b.Send(p, x.Notification); err != nil {
			b.report.Complete(x.ID, sdk.StateFailed, err)
			return
		}
	}
	b.report.Complete(x.ID, sdk.StateDone, nil)
}

// Send writes one datagram to the peer's socket, waiting for room at most
// a second.
func (b *backend) Send(p *kit.Peer[*peer], msg []byte) error {
	d := append(append([]byte{byte(len(b.name))}, b.name...), msg...)
	_ = b.conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, err := b.conn.WriteToUnix(d, p.Value.addr)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT):
		return sdk.Errorf(sdk.CodeRemoteDisconnect, "memcopy: notification to %s: its socket is gone: %v", p.Name, err)
	case err != nil:
		return sdk.Errorf(sdk.CodeBackend, "memcopy: notification to %s: %v; retry", p.Name, err)
	}
	return nil
}
