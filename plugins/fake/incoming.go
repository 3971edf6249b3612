package fake

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// Under fence=incoming the owner's process performs every copy into or out
// of its registered memory that a peer initiated: the peer's DMA engine
// hands each chunk to the owner over a stream socket (the "incoming"
// socket, named in the owner's metadata) and the owner copies it, under its
// lock, only while the region is registered and the agent lives. So no
// byte can land in the memory of an agent that died (its process, the only
// one that writes there, is gone) or deregistered the region (the owner
// refuses the chunk): "owner dead ⇒ no further write" holds exactly, with
// no window between a probe and a copy. Chunks a peer reads come from the
// owner in the same way, so nothing is read from memory the owner's host
// may already have reused. Under fence=initiated no such socket exists:
// peers map the memory and copy themselves, as UCX's shared-memory
// transports do.
//
// An owner in the same process as the initiator (in-process agents: tests,
// the in-process suite) is called directly instead (sameProcess): the same
// copy under the same lock, without a round trip through the kernel and
// the scheduler for every chunk.
//
// The protocol is one request, one reply, in order, over one connection
// per loaded peer: a header (op, region id, offset within the region,
// length), then for a write the bytes; the reply is a status byte, then for
// a successful read the bytes. A refused chunk (region not registered,
// range beyond it, agent dead) is status incomingRefused and moves nothing.

// Operations and statuses of the incoming socket.
const (
	incomingWrite   byte = 1
	incomingRead    byte = 2
	incomingOK      byte = 0
	incomingRefused byte = 1
)

// incomingHeader is the size of a request's header.
const incomingHeader = 1 + 8 + 8 + 4

// maxIncomingChunk bounds one request's length: a peer asking for more is
// hung up on.
const maxIncomingChunk = 64 << 20

// incomingTimeout bounds one request's round trip: an owner that stopped
// answering (its process stopped, not dead) fails the transfer rather than
// holding the engine.
const incomingTimeout = 10 * time.Second

// errIncomingRefused is an owner's refusal of a chunk.
var errIncomingRefused = errors.New("the owner refused the chunk: the region is no longer registered, or the agent died")

// sameProcess maps the incoming address of each open agent of this
// process with fence=incoming to the agent, for initiators in this process.
var sameProcess sync.Map // string -> *Transport

// viaSocket makes initiators use the socket even to an owner in this
// process (tests of the socket path).
var viaSocket = false

// incoming is the owner's side: the listener and the connections it
// serves, closed together by stop.
type incoming struct {
	ln    *net.UnixListener
	addr  string
	mu    sync.Mutex
	conns map[*net.UnixConn]struct{}
	done  bool
}

// listenIncoming binds the agent's incoming socket in the abstract
// namespace: like the notification socket, it needs no file, dies with the
// process and carries random bits, so a later process that reuses the pid
// never serves a stale peer.
func listenIncoming() (*incoming, error) {
	name := fmt.Sprintf("%s%d/%d/%016x", incomingPrefix, pid, socketSeq.Add(1), mrand.Uint64())
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return nil, err
	}
	return &incoming{ln: ln, addr: name, conns: map[*net.UnixConn]struct{}{}}, nil
}

// stop closes the listener and every connection, so that the goroutines
// serving them return.
func (in *incoming) stop() {
	sameProcess.Delete(in.addr)
	in.mu.Lock()
	defer in.mu.Unlock()
	in.done = true
	in.ln.Close()
	for c := range in.conns {
		c.Close()
	}
}

// accept serves peers' connections until the listener closes.
func (t *Transport) accept(in *incoming) {
	defer t.wg.Done()
	for {
		c, err := in.ln.AcceptUnix()
		if err != nil {
			return // closed by stop
		}
		in.mu.Lock()
		if in.done {
			in.mu.Unlock()
			c.Close()
			return
		}
		in.conns[c] = struct{}{}
		t.wg.Add(1)
		in.mu.Unlock()
		go t.serveIncoming(in, c)
	}
}

// serveIncoming answers one peer's requests in order until it hangs up or
// the agent ends.
func (t *Transport) serveIncoming(in *incoming, c *net.UnixConn) {
	defer t.wg.Done()
	defer func() {
		in.mu.Lock()
		delete(in.conns, c)
		in.mu.Unlock()
		c.Close()
	}()
	hdr := make([]byte, incomingHeader)
	var buf []byte
	for {
		if _, err := io.ReadFull(c, hdr); err != nil {
			return
		}
		op, region := hdr[0], sdk.RegionID(binary.BigEndian.Uint64(hdr[1:]))
		off, n := binary.BigEndian.Uint64(hdr[9:]), int(binary.BigEndian.Uint32(hdr[17:]))
		if (op != incomingWrite && op != incomingRead) || n > maxIncomingChunk {
			return
		}
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		b := buf[:n]
		if op == incomingWrite {
			if _, err := io.ReadFull(c, b); err != nil {
				return
			}
		}
		reply := []byte{incomingRefused}
		if t.copyIncoming(op, region, off, b) {
			reply[0] = incomingOK
			if op == incomingRead {
				reply = append(reply, b...)
			}
		}
		if _, err := c.Write(reply); err != nil {
			return
		}
	}
}

// copyIncoming copies one chunk into (write) or out of (read) region at
// off, under the agent's lock, and reports whether it did: never once the
// agent crashed, was killed or closed, nor into a region not registered.
func (t *Transport) copyIncoming(op byte, region sdk.RegionID, off uint64, b []byte) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.crashed || !t.book.Opened() {
		return false
	}
	r := t.served[region]
	if r == nil || r.m.data == nil {
		return false
	}
	data := r.m.data
	if off > uint64(len(data)) || uint64(len(b)) > uint64(len(data))-off {
		return false
	}
	if op == incomingWrite {
		copy(data[off:], b)
	} else {
		copy(b, data[off:])
	}
	return true
}

// incomingConn is the initiator's side: a connection to one peer's
// incoming socket, used by the DMA engine alone, or the owner itself when
// it lives in this process. Once a request failed midway the stream is out
// of step, so the connection is broken for good.
type incomingConn struct {
	owner  *Transport // the owner, in this process; c is nil then
	c      *net.UnixConn
	broken bool
	buf    []byte
}

// dialIncoming connects to a peer's incoming socket, or finds the peer in
// this process.
func dialIncoming(addr string) (*incomingConn, error) {
	if v, ok := sameProcess.Load(addr); ok && !viaSocket {
		return &incomingConn{owner: v.(*Transport)}, nil
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		return nil, err
	}
	return &incomingConn{c: c}, nil
}

// do asks the owner to copy b into region at off (write), or to fill b from
// it (read), and waits for its answer.
func (ic *incomingConn) do(op byte, region sdk.RegionID, off uint64, b []byte) error {
	if ic.owner != nil {
		if !ic.owner.copyIncoming(op, region, off, b) {
			return errIncomingRefused
		}
		return nil
	}
	if ic.broken {
		return errors.New("the connection to the owner broke earlier")
	}
	ic.buf = ic.buf[:0]
	ic.buf = append(ic.buf, op)
	ic.buf = binary.BigEndian.AppendUint64(ic.buf, uint64(region))
	ic.buf = binary.BigEndian.AppendUint64(ic.buf, off)
	ic.buf = binary.BigEndian.AppendUint32(ic.buf, uint32(len(b)))
	if op == incomingWrite {
		ic.buf = append(ic.buf, b...)
	}
	err := ic.round(op, b)
	if err != nil && !errors.Is(err, errIncomingRefused) {
		ic.broken = true
	}
	return err
}

func (ic *incomingConn) round(op byte, b []byte) error {
	if err := ic.c.SetDeadline(time.Now().Add(incomingTimeout)); err != nil {
		return err
	}
	if _, err := ic.c.Write(ic.buf); err != nil {
		return err
	}
	var st [1]byte
	if _, err := io.ReadFull(ic.c, st[:]); err != nil {
		return err
	}
	if st[0] != incomingOK {
		return errIncomingRefused
	}
	if op == incomingRead {
		if _, err := io.ReadFull(ic.c, b); err != nil {
			return err
		}
	}
	return nil
}

// close hangs up.
func (ic *incomingConn) close() {
	if ic.c != nil {
		ic.c.Close()
	}
}
