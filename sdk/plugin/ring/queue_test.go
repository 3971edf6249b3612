package ring

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/sdk"
)

// smallLayout makes rings small enough that tests wrap them many times.
var smallLayout = Layout{subEntries: 8, compEntries: 8, subArena: 4096, compArena: 4096}

// testRings creates a ring file, maps it as the host does and again as the
// plugin does, and unlinks it.
func testRings(t *testing.T, l Layout) (host, plug *mapping) {
	t.Helper()
	mem, path, remove, err := CreateFile(l)
	require.NoError(t, err)
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "ring file mode")
	dst, err := os.Stat(filepath.Dir(path))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), dst.Mode().Perm(), "ring directory mode")
	pmem, pl, err := AttachFile(path)
	require.NoError(t, err)
	require.Equal(t, l, pl)
	remove()
	_, err = os.Stat(filepath.Dir(path))
	require.True(t, os.IsNotExist(err), "the ring directory is gone once both sides mapped it")
	t.Cleanup(func() {
		_ = unix.Munmap(mem)
		_ = unix.Munmap(pmem)
	})
	return newMapping(mem, l), newMapping(pmem, pl)
}

// produce publishes one entry with payload, or returns why it could not.
func produce(p *producer, e entry, payload []byte) error {
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
		err := produce(p, entry{kind: kindRelease, call: uint64(i + 1)}, payload)
		for errors.Is(err, errFull) {
			n, aerr := c.available()
			require.NoError(t, aerr)
			require.Positive(t, n, "the ring is full, so something waits")
			e, got, nerr := c.next()
			require.NoError(t, nerr)
			require.Equal(t, uint64(next+1), e.call)
			require.True(t, bytes.Equal(sent[next], got), "entry %d's bytes", next)
			c.advance()
			next++
			err = produce(p, entry{kind: kindRelease, call: uint64(i + 1)}, payload)
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
		require.NoError(t, produce(p, entry{kind: kindRelease}, nil))
	}
	assert.ErrorIs(t, produce(p, entry{kind: kindRelease}, nil), errFull, "entries full")

	host2, _ := testRings(t, smallLayout)
	p2 := newProducer(host2.sub, "submission")
	require.NoError(t, produce(p2, entry{kind: kindRelease}, make([]byte, 3000)))
	assert.ErrorIs(t, produce(p2, entry{kind: kindRelease}, make([]byte, 1500)), errFull, "arena full")
	err := produce(p2, entry{kind: kindRelease}, make([]byte, 5000))
	require.Error(t, err)
	assert.NotErrorIs(t, err, errFull, "larger than the arena is never room")
}

// TestRingRejectsGarbage: every way a peer can scribble over the mapping
// is a violation naming what was wrong, never a panic or a read out of
// bounds.
func TestRingRejectsGarbage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt func(m *mapping)
		want    string
	}{
		{"tail beyond a ring ahead", func(m *mapping) { m.comp.tail.Store(1 << 40) }, "producer tail"},
		{"sequence number", func(m *mapping) { m.comp.ents[0] ^= 0xff }, "sequence number"},
		{"arena range", func(m *mapping) { putU32(m.comp.ents[48:], 4000); putU32(m.comp.ents[52:], 200) }, "outside the arena"},
		{"arena length", func(m *mapping) { putU32(m.comp.ents[52:], 1<<31) }, "outside the arena"},
		{"kind", func(m *mapping) { m.comp.ents[8] = 99 }, "unknown kind"},
		{"direction", func(m *mapping) { m.comp.ents[8] = byte(kindPost) }, "submission kind"},
		{"items", func(m *mapping) { putU32(m.comp.ents[28:], 10) }, "outside the call"},
		{"payload", func(m *mapping) { m.comp.arena[0] = 0xff }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host, plug := testRings(t, smallLayout)
			p := newProducer(plug.comp, "completion")
			w := encodeEvent(nil, sdk.Event{Handle: 7, State: sdk.StateDone})
			require.NoError(t, produce(p, entry{kind: kindEvents, count: 1, total: 1}, w))
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
			var rerr *violation
			require.ErrorAs(t, err, &rerr)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	t.Run("tail behind head", func(t *testing.T) {
		host, plug := testRings(t, smallLayout)
		p := newProducer(plug.comp, "completion")
		require.NoError(t, produce(p, entry{kind: kindStates}, nil))
		c := newConsumer(host.comp, "completion")
		_, _, err := c.next()
		require.NoError(t, err)
		c.advance()
		plug.comp.tail.Store(0)
		_, err = c.available()
		var rerr *violation
		require.ErrorAs(t, err, &rerr)
		assert.Contains(t, err.Error(), "producer tail 0 outside [1,")
	})
	t.Run("head beyond tail", func(t *testing.T) {
		host, plug := testRings(t, smallLayout)
		p := newProducer(host.sub, "submission")
		require.NoError(t, produce(p, entry{kind: kindRelease}, nil))
		plug.sub.head.Store(9)
		err := produce(p, entry{kind: kindRelease}, nil)
		var rerr *violation
		require.ErrorAs(t, err, &rerr)
		assert.Contains(t, err.Error(), "consumer head")
	})
}

func putU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}
