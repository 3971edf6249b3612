package core

// Inbox queues what the owner learned outside a command (a background
// handshake finished or failed, a fence completed) for the next Poll, which
// applies it first, in push order. Like every method of a Core, it is called
// from the owner goroutine only: other goroutines hand what they observe to
// the owner (over a channel, as the host does), never to the Core.
type Inbox struct {
	items []input
}

type inputKind uint8

const (
	inputHandshakeDone inputKind = iota + 1
	inputHandshakeFailed
	inputFenced
)

type input struct {
	kind  inputKind
	spec  PeerSpec
	peer  string
	err   error
	epoch Epoch
}

// HandshakeDone hands the owner a peer whose metadata a background goroutine
// fetched; the next Poll connects it (ConnectPeer) and posts the requests
// waiting for it. The spec is used as is; do not modify it afterwards.
func (q *Inbox) HandshakeDone(spec PeerSpec) {
	q.push(input{kind: inputHandshakeDone, spec: spec})
}

// HandshakeFailed tells the owner that the handshake with peer failed before
// it could be connected; the next Poll fails the requests waiting for it,
// with err as their reason.
func (q *Inbox) HandshakeFailed(peer string, err error) {
	q.push(input{kind: inputHandshakeFailed, peer: peer, err: err})
}

// Fenced tells the owner that the transport of epoch is fenced: its process
// is dead, so none of its transfers runs any more (see Core.Fenced).
func (q *Inbox) Fenced(epoch Epoch) {
	q.push(input{kind: inputFenced, epoch: epoch})
}

func (q *Inbox) push(in input) { q.items = append(q.items, in) }

func (q *Inbox) len() int { return len(q.items) }

// take moves the queued inputs into buf (reused) and returns them.
func (q *Inbox) take(buf []input) []input {
	buf = append(buf[:0], q.items...)
	clear(q.items)
	q.items = q.items[:0]
	return buf
}
