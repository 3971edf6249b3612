package core

import "strings"

// The notifications core exchanges with its peers' cores are UTF-8 text: a
// prefix naming the protocol version and the event, then the request id,
// nothing else. Messages with another prefix are not core's and are ignored.
//
//	"custody/1 consumed " + id   consumer to producer: I hold the bytes of id
//	"custody/1 written " + id    producer to consumer (push): every part of
//	                             my Write of id is DONE and released
const (
	// consumedPrefix starts the notification a consumer sends its producer
	// once it holds the bytes of a request. A producer counts one such
	// message per consumer rank; when a send's count reaches its consumers,
	// the send is finished.
	consumedPrefix = "custody/1 consumed "
	// writtenPrefix starts the notification a push producer sends each
	// consumer rank it wrote to once every part of its Write is DONE (the
	// bytes are in place at the destination) and released; never after a
	// failure. A consumer counts one such message per producer rank; when a
	// receive's count reaches its producers, the receive is finished.
	writtenPrefix = "custody/1 written "
)

// ConsumedMessage is the notification that tells a producer its request id
// has been read (see consumedPrefix for the format).
func ConsumedMessage(id RequestID) []byte {
	return []byte(consumedPrefix + string(id))
}

// WrittenMessage is the notification that tells a push consumer that a
// producer's writes of request id all landed (see writtenPrefix for the
// format).
func WrittenMessage(id RequestID) []byte {
	return []byte(writtenPrefix + string(id))
}

// parseConsumed returns the request id of a consumed notification.
func parseConsumed(msg []byte) (RequestID, bool) {
	return parseNote(msg, consumedPrefix)
}

// parseWritten returns the request id of a written notification.
func parseWritten(msg []byte) (RequestID, bool) {
	return parseNote(msg, writtenPrefix)
}

func parseNote(msg []byte, prefix string) (RequestID, bool) {
	s := string(msg)
	if !strings.HasPrefix(s, prefix) || len(s) == len(prefix) {
		return "", false
	}
	return RequestID(s[len(prefix):]), true
}
