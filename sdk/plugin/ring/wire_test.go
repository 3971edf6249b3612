package ring

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

func TestWireRoundTrip(t *testing.T) {
	specs := []sdk.PostSpec{
		{Op: sdk.OpWrite, Local: 1, LocalIndices: []uint32{0, 5}, Remote: 2, RemoteIndices: []uint32{3, 4}, Notification: []byte("done")},
		{Op: sdk.OpRead, Local: 3, Remote: 4},
	}
	var w wire
	for _, s := range specs {
		w = encodePostSpec(w, s)
	}
	require.Equal(t, postSpecBytes(specs[0])+postSpecBytes(specs[1]), len(w))
	got, err := decodePostSpecs(w, 2)
	require.NoError(t, err)
	assert.Equal(t, specs, got)

	res := []sdk.PostResult{{ID: 9}, {Err: sdk.Errorf(sdk.CodeInvalidArgument, "index 5 outside dlist 1")}, {Err: errors.New("plain")}}
	w = nil
	for _, r := range res {
		w = encodePostResult(w, r)
	}
	gotRes, err := decodePostResults(w, 3)
	require.NoError(t, err)
	assert.Equal(t, res[:2], gotRes[:2])
	assert.Equal(t, sdk.Errorf(sdk.CodeBackend, "plain"), gotRes[2].Err, "a plain error crosses as BACKEND, as over gRPC")

	evs := []sdk.Event{{Handle: 1, State: sdk.StateFailed, Reason: sdk.Errorf(sdk.CodeRemoteDisconnect, "peer b gone")}, {Handle: 2, State: sdk.StateDone}}
	w = nil
	for _, e := range evs {
		w = encodeEvent(w, e)
	}
	gotEvs, rel, err := decodeEvents(w, 2, false)
	require.NoError(t, err)
	assert.Equal(t, evs, gotEvs)
	assert.Nil(t, rel)

	// Under release at terminal each event says whether the plugin
	// released its handle; only a terminal one may be, and only 0 or 1.
	w = nil
	for i, e := range evs {
		w = encodeReleasedEvent(w, e, i == 1)
	}
	gotEvs, rel, err = decodeEvents(w, 2, true)
	require.NoError(t, err)
	assert.Equal(t, evs, gotEvs)
	assert.Equal(t, []bool{false, true}, rel)
	_, _, err = decodeEvents(w, 2, false)
	assert.ErrorContains(t, err, "events: 2 bytes left over", "a released byte the host did not ask for is garbage")
	bad := append(wire(nil), w...)
	bad[len(bad)-1] = 2
	_, _, err = decodeEvents(bad, 2, true)
	assert.ErrorContains(t, err, "event 1 (handle 2): released byte 2, not 0 or 1")
	w = encodeReleasedEvent(nil, sdk.Event{Handle: 9, State: sdk.StateInProgress}, true)
	_, _, err = decodeEvents(w, 1, true)
	assert.ErrorContains(t, err, "event 0 (handle 9): released in state IN_PROGRESS, which is not terminal")

	outs := []sdk.OutboundNotification{{Peer: 3, Message: []byte("hi")}, {Peer: 4}}
	w = nil
	for _, n := range outs {
		w = encodeOutNote(w, n)
	}
	require.Equal(t, outNoteBytes(outs[0])+outNoteBytes(outs[1]), len(w))
	gotOuts, err := decodeOutNotes(w, 2)
	require.NoError(t, err)
	assert.Equal(t, outs, gotOuts)
	_, err = decodeOutNotes(w[:len(w)-1], 2)
	assert.ErrorContains(t, err, "outbound notification 1")

	ns := []sdk.Notification{{From: "a", Message: []byte("hi")}, {From: "b"}}
	w = nil
	for _, n := range ns {
		w = encodeNote(w, n)
	}
	gotNs, err := decodeNotes(w, 2)
	require.NoError(t, err)
	assert.Equal(t, ns, gotNs)

	_, err = decodePostSpecs(w, 1<<30)
	assert.ErrorContains(t, err, "cannot fit", "a count the payload cannot hold allocates nothing")
}

// FuzzRingDecode: no payload, count or entry makes a decoder panic or read
// out of bounds; what a decoder accepts re-encodes to the same bytes.
func FuzzRingDecode(f *testing.F) {
	f.Add([]byte(encodePostSpec(nil, sdk.PostSpec{Op: sdk.OpWrite, Local: 1, LocalIndices: []uint32{0}, Remote: 2, RemoteIndices: []uint32{0}, Notification: []byte("n")})), uint32(1))
	f.Add([]byte(encodeEvent(nil, sdk.Event{Handle: 1, State: sdk.StateDone})), uint32(1))
	f.Add([]byte(encodeNote(nil, sdk.Notification{From: "a", Message: []byte("m")})), uint32(1))
	f.Add([]byte(encodeOutNote(nil, sdk.OutboundNotification{Peer: 7, Message: []byte("custody/2 consumed 0123456789abcdef r1")})), uint32(1))
	f.Add([]byte(encodeOutNote(encodeOutNote(nil, sdk.OutboundNotification{Peer: 1}), sdk.OutboundNotification{Peer: 2, Message: []byte("x")})), uint32(2))
	f.Add([]byte(encodeOutNote(nil, sdk.OutboundNotification{Peer: 7, Message: []byte("cut")}))[:13], uint32(1))
	f.Add(make([]byte, entrySize), uint32(0))
	for _, kind := range []uint16{kindSendNotes, kindSendNotesRes} {
		ent := make([]byte, entrySize)
		(&entry{kind: kind, count: 2, total: 2, arenaLen: 24}).encode(ent)
		f.Add(ent, uint32(2))
		(&entry{kind: kind, code: 3, count: 1, total: 1}).encode(ent)
		f.Add(append([]byte(nil), ent...), uint32(1))
	}
	f.Fuzz(func(t *testing.T, b []byte, count uint32) {
		if specs, err := decodePostSpecs(b, count); err == nil {
			var w wire
			for _, s := range specs {
				w = encodePostSpec(w, s)
			}
			if !bytes.Equal(w, b) {
				t.Fatalf("post specs re-encode differently")
			}
		}
		if msgs, err := decodeOutNotes(b, count); err == nil {
			var w wire
			for _, m := range msgs {
				w = encodeOutNote(w, m)
			}
			if !bytes.Equal(w, b) {
				t.Fatalf("outbound notifications re-encode differently")
			}
		}
		_, _ = decodeIDs(b, count)
		_, _ = decodePostResults(b, count)
		_, _ = decodeErrs(b, count)
		_, _, _ = decodeEvents(b, count, false)
		_, _, _ = decodeEvents(b, count, true)
		_, _ = decodeNotes(b, count)
		if len(b) >= entrySize {
			var e entry
			e.decode(b)
			_ = e.check(true)
			_ = e.check(false)
		}
	})
}
