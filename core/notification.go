package core

import (
	"fmt"
	"strconv"
)

// The notifications core exchanges with its peers' cores are UTF-8 text: a
// prefix naming the protocol version and the event, the request's token as
// 16 lowercase hex digits, a space, then the request id, nothing else.
// Messages with another prefix are not core's and are ignored.
//
//	"custody/2 consumed " + token + " " + id   consumer to producer: I hold
//	                                           the bytes of id
//	"custody/2 written " + token + " " + id    producer to consumer (push):
//	                                           every part of my Write of id
//	                                           is DONE and released
//
// The token tells registrations of one id apart: a notification counts only
// for the registration of its id with the same token (see Token).
const (
	// consumedPrefix starts the notification a consumer sends its producer
	// once it holds the bytes of a request. A producer counts one such
	// message per consumer rank; when a send's count reaches its consumers,
	// the send is finished.
	consumedPrefix = "custody/2 consumed "
	// writtenPrefix starts the notification a push producer sends each
	// consumer rank it wrote to once every part of its Write is DONE (the
	// bytes are in place at the destination) and released; never after a
	// failure. A consumer counts one such message per producer rank; when a
	// receive's count reaches its producers, the receive is finished.
	writtenPrefix = "custody/2 written "
	tokenDigits   = 16
)

// Token tells apart the registrations of one request id, so that a late
// notification of an earlier request under the same id never counts for a
// later one. The engine draws one per request (64 random bits, never zero)
// and passes it, with the request id, to both sides: the producer's
// ExpectSend or Write and the consumer's Read or ExpectReceive. Every
// notification of the request carries it, and each side counts only those
// whose token is its registration's; the others are dropped with an Alert.
type Token uint64

// ConsumedMessage is the notification that tells a producer its request id
// (registered with token) has been read; see consumedPrefix.
func ConsumedMessage(id RequestID, token Token) []byte {
	return noteMessage(consumedPrefix, id, token)
}

// WrittenMessage is the notification that tells a push consumer that a
// producer's writes of request id (registered with token) all landed; see
// writtenPrefix.
func WrittenMessage(id RequestID, token Token) []byte {
	return noteMessage(writtenPrefix, id, token)
}

func noteMessage(prefix string, id RequestID, token Token) []byte {
	return fmt.Appendf(nil, "%s%016x %s", prefix, uint64(token), id)
}

// parseConsumed returns the request id and token of a consumed
// notification.
func parseConsumed(msg []byte) (RequestID, Token, bool) {
	return parseNote(msg, consumedPrefix)
}

// parseWritten returns the request id and token of a written notification.
func parseWritten(msg []byte) (RequestID, Token, bool) {
	return parseNote(msg, writtenPrefix)
}

func parseNote(msg []byte, prefix string) (RequestID, Token, bool) {
	s := string(msg)
	if len(s) <= len(prefix)+tokenDigits+1 || s[:len(prefix)] != prefix || s[len(prefix)+tokenDigits] != ' ' {
		return "", 0, false
	}
	t, err := strconv.ParseUint(s[len(prefix):len(prefix)+tokenDigits], 16, 64)
	if err != nil || t == 0 {
		return "", 0, false
	}
	return RequestID(s[len(prefix)+tokenDigits+1:]), Token(t), true
}

// NotifyConsumed sends the consumed notification for request id, with the
// token of the producer's Write, to every
// rank of a connected peer: what a push consumer does once it holds the
// bytes a producer wrote. The send is Work in the next Ready; a rank it
// fails for is a "consumed_notification_failed" Alert.
func (c *Core) NotifyConsumed(name string, id RequestID, token Token) error {
	p := c.peers[name]
	if p == nil || !c.attached {
		return fmt.Errorf("core: notify peer %q of request %q: peer not connected", name, id)
	}
	ranks := make([]int, len(p.ranks))
	for i := range ranks {
		ranks[i] = i
	}
	c.notify(p, ranks, ConsumedMessage(id, token), "consumed_notification_failed", id)
	return nil
}
