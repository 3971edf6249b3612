package ring

import (
	"encoding/binary"
	"fmt"

	"github.com/custody-dev/custody/sdk"
)

// This file is the wire format of the items in an entry's arena bytes.
// Every decoder checks every length against what is left before it reads
// or allocates, and says what was wrong.

// wire is an append-only encoder.
type wire []byte

func (w wire) u8(v uint8) wire   { return append(w, v) }
func (w wire) u32(v uint32) wire { return binary.LittleEndian.AppendUint32(w, v) }
func (w wire) u64(v uint64) wire { return binary.LittleEndian.AppendUint64(w, v) }

// bytes appends a length-prefixed byte string.
func (w wire) bytes(b []byte) wire { return append(w.u32(uint32(len(b))), b...) }

// err appends an error as its code and message, exactly as statusOf carries
// it over gRPC; a message past maxMessage is cut there.
func (w wire) err(err error) wire {
	if err == nil {
		return w.u8(0).u32(0)
	}
	c, msg := sdk.CodeOf(err), sdk.MessageOf(err)
	if c == sdk.CodeOK {
		c, msg = sdk.CodeBackend, "transport returned an error with code OK: "+msg
	}
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
	}
	return append(w.u8(uint8(c)).u32(uint32(len(msg))), msg...)
}

// reader decodes what a wire encoded; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = violationf(format, args...)
	}
}

func (r *reader) u8() uint8 {
	if r.err != nil || len(r.b) < 1 {
		r.fail("payload ends early (want 1 byte)")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) u32() uint32 {
	if r.err != nil || len(r.b) < 4 {
		r.fail("payload ends early (want 4 bytes, %d left)", len(r.b))
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *reader) u64() uint64 {
	if r.err != nil || len(r.b) < 8 {
		r.fail("payload ends early (want 8 bytes, %d left)", len(r.b))
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

// bytes reads a length-prefixed byte string, copied (nil when empty).
func (r *reader) bytes(what string) []byte {
	n := r.u32()
	if r.err != nil {
		return nil
	}
	if uint64(n) > uint64(len(r.b)) {
		r.fail("%s of %d bytes, only %d left", what, n, len(r.b))
		return nil
	}
	if n == 0 {
		return nil
	}
	out := append([]byte(nil), r.b[:n]...)
	r.b = r.b[n:]
	return out
}

func (r *reader) err2() error {
	c := r.u8()
	msg := r.bytes("error message")
	if r.err != nil {
		return nil
	}
	if c == 0 {
		if len(msg) != 0 {
			r.fail("OK item carries a message of %d bytes", len(msg))
		}
		return nil
	}
	return sdk.FromCode(sdk.Code(c), string(msg))
}

func (r *reader) indices(what string) []uint32 {
	n := r.u32()
	if r.err != nil {
		return nil
	}
	if uint64(n)*4 > uint64(len(r.b)) {
		r.fail("%s of %d indices, only %d bytes left", what, n, len(r.b))
		return nil
	}
	if n == 0 {
		return nil
	}
	out := make([]uint32, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(r.b[4*i:])
	}
	r.b = r.b[4*n:]
	return out
}

// done checks that the payload was read exactly.
func (r *reader) done(what string) error {
	if r.err == nil && len(r.b) != 0 {
		r.fail("%s: %d bytes left over", what, len(r.b))
	}
	return r.err
}

// need checks that count items of at least min bytes each can be in the
// payload, before anything is allocated for them.
func (r *reader) need(count uint32, min int, what string) bool {
	if uint64(count)*uint64(min) > uint64(len(r.b)) {
		r.fail("%d %s cannot fit in %d bytes", count, what, len(r.b))
		return false
	}
	return true
}

func encodePostSpec(w wire, p sdk.PostSpec) wire {
	w = w.u8(uint8(p.Op)).u64(uint64(p.Local)).u64(uint64(p.Remote))
	w = w.u32(uint32(len(p.LocalIndices)))
	for _, i := range p.LocalIndices {
		w = w.u32(i)
	}
	w = w.u32(uint32(len(p.RemoteIndices)))
	for _, i := range p.RemoteIndices {
		w = w.u32(i)
	}
	return w.bytes(p.Notification)
}

// postSpecBytes is the encoded size of p.
func postSpecBytes(p sdk.PostSpec) int {
	return 1 + 8 + 8 + 4 + 4*len(p.LocalIndices) + 4 + 4*len(p.RemoteIndices) + 4 + len(p.Notification)
}

func decodePostSpecs(b []byte, count uint32) ([]sdk.PostSpec, error) {
	r := reader{b: b}
	if !r.need(count, 29, "post specs") {
		return nil, r.err
	}
	out := make([]sdk.PostSpec, count)
	for i := range out {
		out[i] = sdk.PostSpec{
			Op:     sdk.Op(r.u8()),
			Local:  sdk.DlistID(r.u64()),
			Remote: sdk.DlistID(r.u64()),
		}
		out[i].LocalIndices = r.indices("local index list")
		out[i].RemoteIndices = r.indices("remote index list")
		out[i].Notification = r.bytes("notification")
		if r.err != nil {
			return nil, fmt.Errorf("post spec %d: %w", i, r.err)
		}
	}
	return out, r.done("post specs")
}

func encodeIDs(w wire, ids []sdk.HandleID) wire {
	for _, id := range ids {
		w = w.u64(uint64(id))
	}
	return w
}

func decodeIDs(b []byte, count uint32) ([]sdk.HandleID, error) {
	r := reader{b: b}
	if !r.need(count, 8, "handle ids") {
		return nil, r.err
	}
	out := make([]sdk.HandleID, count)
	for i := range out {
		out[i] = sdk.HandleID(r.u64())
	}
	return out, r.done("handle ids")
}

func encodePostResult(w wire, p sdk.PostResult) wire { return w.u64(uint64(p.ID)).err(p.Err) }

func decodePostResults(b []byte, count uint32) ([]sdk.PostResult, error) {
	r := reader{b: b}
	if !r.need(count, 13, "post results") {
		return nil, r.err
	}
	out := make([]sdk.PostResult, count)
	for i := range out {
		out[i].ID = sdk.HandleID(r.u64())
		out[i].Err = r.err2()
	}
	return out, r.done("post results")
}

func decodeErrs(b []byte, count uint32) ([]error, error) {
	r := reader{b: b}
	if !r.need(count, 5, "item errors") {
		return nil, r.err
	}
	out := make([]error, count)
	for i := range out {
		out[i] = r.err2()
	}
	return out, r.done("item errors")
}

func encodeEvent(w wire, e sdk.Event) wire {
	return w.u64(uint64(e.Handle)).u8(uint8(e.State)).err(e.Reason)
}

// encodeReleasedEvent is an event under release at terminal: one more
// byte says whether the plugin released the handle (1) or not (0).
func encodeReleasedEvent(w wire, e sdk.Event, released bool) wire {
	var b uint8
	if released {
		b = 1
	}
	return encodeEvent(w, e).u8(b)
}

// decodeEvents reads count events; with released (release at terminal),
// each carries its released byte, returned in rel.
func decodeEvents(b []byte, count uint32, released bool) (evs []sdk.Event, rel []bool, err error) {
	r := reader{b: b}
	size := 14
	if released {
		size++
	}
	if !r.need(count, size, "events") {
		return nil, nil, r.err
	}
	evs = make([]sdk.Event, count)
	if released {
		rel = make([]bool, count)
	}
	for i := range evs {
		evs[i].Handle = sdk.HandleID(r.u64())
		evs[i].State = sdk.State(r.u8())
		evs[i].Reason = r.err2()
		if !released {
			continue
		}
		switch f := r.u8(); {
		case r.err != nil:
		case f > 1:
			r.fail("event %d (handle %d): released byte %d, not 0 or 1", i, evs[i].Handle, f)
		case f == 1 && !evs[i].State.Terminal():
			r.fail("event %d (handle %d): released in state %v, which is not terminal", i, evs[i].Handle, evs[i].State)
		default:
			rel[i] = f == 1
		}
	}
	if err := r.done("events"); err != nil {
		return nil, nil, err
	}
	return evs, rel, nil
}

func encodeNote(w wire, n sdk.Notification) wire { return w.bytes([]byte(n.From)).bytes(n.Message) }

func decodeNotes(b []byte, count uint32) ([]sdk.Notification, error) {
	r := reader{b: b}
	if !r.need(count, 8, "notifications") {
		return nil, r.err
	}
	out := make([]sdk.Notification, count)
	for i := range out {
		out[i].From = string(r.bytes("sender"))
		out[i].Message = r.bytes("notification")
	}
	return out, r.done("notifications")
}

func encodeOutNote(w wire, n sdk.OutboundNotification) wire {
	return w.u64(uint64(n.Peer)).bytes(n.Message)
}

// outNoteBytes is the encoded size of n.
func outNoteBytes(n sdk.OutboundNotification) int { return 8 + 4 + len(n.Message) }

func decodeOutNotes(b []byte, count uint32) ([]sdk.OutboundNotification, error) {
	r := reader{b: b}
	if !r.need(count, 12, "outbound notifications") {
		return nil, r.err
	}
	out := make([]sdk.OutboundNotification, count)
	for i := range out {
		out[i].Peer = sdk.PeerID(r.u64())
		out[i].Message = r.bytes("notification")
		if r.err != nil {
			return nil, fmt.Errorf("outbound notification %d: %w", i, r.err)
		}
	}
	return out, r.done("outbound notifications")
}

// callError is the error a result entry with a non-zero code carries: its
// payload is the message.
func callError(e entry, payload []byte) error {
	if e.code == 0 {
		return nil
	}
	return sdk.FromCode(sdk.Code(e.code), string(payload))
}

// errCodeMessage is an error as a call-level code and message, the way
// statusOf carries it.
func errCodeMessage(err error) (uint16, []byte) {
	w := wire(nil).err(err)
	r := reader{b: w}
	c := r.u8()
	return uint16(c), r.bytes("")
}
