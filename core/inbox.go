package core

import "sync"

// Inbox is the one way work observed by other goroutines reaches a Core
// (seed 001's rule): a background handshake finishing or failing, a fence
// completing. Other goroutines push into it at any time; the owner drains it
// at the start of every Poll, in push order. Nothing else of a Core may be
// touched by another goroutine.
type Inbox struct {
	mu    sync.Mutex
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

func (q *Inbox) push(in input) {
	q.mu.Lock()
	q.items = append(q.items, in)
	q.mu.Unlock()
}

func (q *Inbox) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// take moves the queued inputs into buf (reused) and returns them.
func (q *Inbox) take(buf []input) []input {
	q.mu.Lock()
	buf = append(buf[:0], q.items...)
	clear(q.items)
	q.items = q.items[:0]
	q.mu.Unlock()
	return buf
}
