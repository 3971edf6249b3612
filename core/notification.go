package core

import "strings"

// consumedPrefix starts the notification a consumer sends its producer once
// it holds the bytes of a request: "custody/1 consumed " followed by the
// request id, in UTF-8, nothing else. A producer counts one such message per
// consumer rank; when a send's count reaches its consumers, the send is
// finished. Messages with another prefix are not core's and are ignored.
const consumedPrefix = "custody/1 consumed "

// ConsumedMessage is the notification that tells a producer its request id
// has been read (see consumedPrefix for the format).
func ConsumedMessage(id RequestID) []byte {
	return []byte(consumedPrefix + string(id))
}

// parseConsumed returns the request id of a consumed notification.
func parseConsumed(msg []byte) (RequestID, bool) {
	s := string(msg)
	if !strings.HasPrefix(s, consumedPrefix) || len(s) == len(consumedPrefix) {
		return "", false
	}
	return RequestID(s[len(consumedPrefix):]), true
}
