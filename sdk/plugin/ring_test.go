package plugin

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/sdk"
)

// smallLayout makes rings small enough that tests wrap them many times.
var smallLayout = ringLayout{subEntries: 8, compEntries: 8, subArena: 4096, compArena: 4096}

// testRings creates a ring file, maps it as the host does and again as the
// plugin does, and unlinks it.
func testRings(t *testing.T, l ringLayout) (host, plug *ringMap) {
	t.Helper()
	mem, path, remove, err := createRingFile(l)
	require.NoError(t, err)
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "ring file mode")
	dst, err := os.Stat(filepath.Dir(path))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), dst.Mode().Perm(), "ring directory mode")
	pmem, pl, err := attachRingFile(path)
	require.NoError(t, err)
	require.Equal(t, l, pl)
	remove()
	_, err = os.Stat(filepath.Dir(path))
	require.True(t, os.IsNotExist(err), "the ring directory is gone once both sides mapped it")
	t.Cleanup(func() {
		_ = unix.Munmap(mem)
		_ = unix.Munmap(pmem)
	})
	return newRingMap(mem, l), newRingMap(pmem, pl)
}

// produce publishes one entry with payload, or returns why it could not.
func produce(p *producer, e ringEntry, payload []byte) error {
	ent, arena, off, err := p.reserve(len(payload))
	if err != nil {
		return err
	}
	copy(arena, payload)
	e.seq, e.arenaOff, e.arenaLen = p.tail, off, uint32(len(payload))
	e.encode(ent)
	p.publish()
	return nil
}

func TestRingCarriesEntriesInOrderAcrossWraps(t *testing.T) {
	host, plug := testRings(t, smallLayout)
	p := newProducer(host.sub, "submission")
	c := newConsumer(plug.sub, "submission")
	var sent [][]byte
	next := 0
	for i := range 500 {
		// Sizes vary so the arena wraps at every offset; the producer
		// runs ahead of the consumer until the ring is full.
		payload := bytes.Repeat([]byte{byte(i)}, (i*379)%1500)
		err := produce(p, ringEntry{kind: kindRelease, call: uint64(i + 1)}, payload)
		for errors.Is(err, errRingFull) {
			n, aerr := c.available()
			require.NoError(t, aerr)
			require.Positive(t, n, "the ring is full, so something waits")
			e, got, nerr := c.next()
			require.NoError(t, nerr)
			require.Equal(t, uint64(next+1), e.call)
			require.True(t, bytes.Equal(sent[next], got), "entry %d's bytes", next)
			c.advance()
			next++
			err = produce(p, ringEntry{kind: kindRelease, call: uint64(i + 1)}, payload)
		}
		require.NoError(t, err)
		sent = append(sent, payload)
	}
	for {
		n, err := c.available()
		require.NoError(t, err)
		if n == 0 {
			break
		}
		e, got, err := c.next()
		require.NoError(t, err)
		require.Equal(t, uint64(next+1), e.call)
		require.True(t, bytes.Equal(sent[next], got), "entry %d's bytes", next)
		c.advance()
		next++
	}
	assert.Equal(t, len(sent), next, "every entry arrived once")
}

func TestRingFull(t *testing.T) {
	host, _ := testRings(t, smallLayout)
	p := newProducer(host.sub, "submission")
	for range smallLayout.subEntries {
		require.NoError(t, produce(p, ringEntry{kind: kindRelease}, nil))
	}
	assert.ErrorIs(t, produce(p, ringEntry{kind: kindRelease}, nil), errRingFull, "entries full")

	host2, _ := testRings(t, smallLayout)
	p2 := newProducer(host2.sub, "submission")
	require.NoError(t, produce(p2, ringEntry{kind: kindRelease}, make([]byte, 3000)))
	assert.ErrorIs(t, produce(p2, ringEntry{kind: kindRelease}, make([]byte, 1500)), errRingFull, "arena full")
	err := produce(p2, ringEntry{kind: kindRelease}, make([]byte, 5000))
	require.Error(t, err)
	assert.NotErrorIs(t, err, errRingFull, "larger than the arena is never room")
}

// TestRingRejectsGarbage: every way a peer can scribble over the mapping
// is a ringError naming what was wrong, never a panic or a read out of
// bounds.
func TestRingRejectsGarbage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt func(m *ringMap)
		want    string
	}{
		{"tail beyond a ring ahead", func(m *ringMap) { m.comp.tail.Store(1 << 40) }, "producer tail"},
		{"sequence number", func(m *ringMap) { m.comp.ents[0] ^= 0xff }, "sequence number"},
		{"arena range", func(m *ringMap) { putU32(m.comp.ents[48:], 4000); putU32(m.comp.ents[52:], 200) }, "outside the arena"},
		{"arena length", func(m *ringMap) { putU32(m.comp.ents[52:], 1<<31) }, "outside the arena"},
		{"kind", func(m *ringMap) { m.comp.ents[8] = 99 }, "unknown kind"},
		{"direction", func(m *ringMap) { m.comp.ents[8] = byte(kindPost) }, "submission kind"},
		{"items", func(m *ringMap) { putU32(m.comp.ents[28:], 10) }, "outside the call"},
		{"payload", func(m *ringMap) { m.comp.arena[0] = 0xff }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host, plug := testRings(t, smallLayout)
			p := newProducer(plug.comp, "completion")
			w := encodeEvent(nil, sdk.Event{Handle: 7, State: sdk.StateDone})
			require.NoError(t, produce(p, ringEntry{kind: kindEvents, count: 1, total: 1}, w))
			tc.corrupt(plug)
			c := newConsumer(host.comp, "completion")
			err := func() error {
				n, err := c.available()
				if err != nil || n == 0 {
					return err
				}
				e, payload, err := c.next()
				if err != nil {
					return err
				}
				if err := e.check(false); err != nil {
					return err
				}
				_, _, err = decodeEvents(payload, e.count, false)
				return err
			}()
			if tc.want == "" {
				// A payload byte that still decodes is not garbage the
				// ring can see; it must decode without panicking.
				return
			}
			var rerr *ringError
			require.ErrorAs(t, err, &rerr)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	t.Run("tail behind head", func(t *testing.T) {
		host, plug := testRings(t, smallLayout)
		p := newProducer(plug.comp, "completion")
		require.NoError(t, produce(p, ringEntry{kind: kindStates}, nil))
		c := newConsumer(host.comp, "completion")
		_, _, err := c.next()
		require.NoError(t, err)
		c.advance()
		plug.comp.tail.Store(0)
		_, err = c.available()
		var rerr *ringError
		require.ErrorAs(t, err, &rerr)
		assert.Contains(t, err.Error(), "producer tail 0 outside [1,")
	})
	t.Run("head beyond tail", func(t *testing.T) {
		host, plug := testRings(t, smallLayout)
		p := newProducer(host.sub, "submission")
		require.NoError(t, produce(p, ringEntry{kind: kindRelease}, nil))
		plug.sub.head.Store(9)
		err := produce(p, ringEntry{kind: kindRelease}, nil)
		var rerr *ringError
		require.ErrorAs(t, err, &rerr)
		assert.Contains(t, err.Error(), "consumer head")
	})
}

func putU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

func TestAttachRingFileRefusesStrangers(t *testing.T) {
	mem, path, remove, err := createRingFile(smallLayout)
	require.NoError(t, err)
	defer remove()
	defer unix.Munmap(mem)

	require.NoError(t, os.Chmod(path, 0o644))
	_, _, err = attachRingFile(path)
	assert.ErrorContains(t, err, "mode 0644, want 0600")
	require.NoError(t, os.Chmod(path, 0o600))

	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(path, link))
	_, _, err = attachRingFile(link)
	assert.Error(t, err, "a symlink is not followed")

	mem[offMagic] ^= 1
	_, _, err = attachRingFile(path)
	assert.ErrorContains(t, err, "not a ring file")
	mem[offMagic] ^= 1

	putU32(mem[offSubEntries:], 9)
	_, _, err = attachRingFile(path)
	assert.ErrorContains(t, err, "header states")
}

// TestDoorbellWakesASleeper: a side asleep on its doorbell wakes when the
// peer publishes and rings.
func TestDoorbellWakesASleeper(t *testing.T) {
	host, plug := testRings(t, smallLayout)
	c := newConsumer(plug.sub, "submission")
	p := newProducer(host.sub, "submission")
	woke := make(chan uint64)
	var asleep atomic.Bool
	go func() {
		for {
			v := plug.plugin.prepare()
			if n, _ := c.available(); n > 0 {
				plug.plugin.cancel()
				woke <- n
				return
			}
			asleep.Store(true)
			plug.plugin.wait(v, 0)
		}
	}()
	for !asleep.Load() {
		time.Sleep(time.Millisecond) // waits for the goroutine to go to sleep; not a synchronisation of the result
	}
	require.NoError(t, produce(p, ringEntry{kind: kindRelease}, nil))
	host.plugin.ring()
	select {
	case n := <-woke:
		assert.Equal(t, uint64(1), n)
	case <-time.After(10 * time.Second):
		t.Fatal("the sleeper was not woken by the doorbell")
	}
}

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
	f.Add(make([]byte, ringEntrySize), uint32(0))
	for _, kind := range []uint16{kindSendNotes, kindSendNotesRes} {
		ent := make([]byte, ringEntrySize)
		(&ringEntry{kind: kind, count: 2, total: 2, arenaLen: 24}).encode(ent)
		f.Add(ent, uint32(2))
		(&ringEntry{kind: kind, code: 3, count: 1, total: 1}).encode(ent)
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
		if len(b) >= ringEntrySize {
			var e ringEntry
			e.decode(b)
			_ = e.check(true)
			_ = e.check(false)
		}
	})
}
