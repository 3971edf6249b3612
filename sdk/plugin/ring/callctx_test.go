package ring

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// A call's context arms no timer until someone asks for Done, and then
// behaves as context.WithDeadline's would.
func TestCallCtx(t *testing.T) {
	t.Run("passed deadline", func(t *testing.T) {
		c := newCallCtx(time.Now().Add(-time.Second))
		dl, ok := c.Deadline()
		assert.True(t, ok)
		assert.False(t, dl.IsZero())
		assert.ErrorIs(t, c.Err(), context.DeadlineExceeded)
		assert.True(t, closed(c.Done()), "Done is closed once Err reports the deadline")
		c.end(context.Canceled)
		assert.ErrorIs(t, c.Err(), context.DeadlineExceeded, "the first error stays")
	})
	t.Run("deadline passes while a caller waits on Done", func(t *testing.T) {
		c := newCallCtx(time.Now().Add(time.Millisecond))
		select {
		case <-c.Done():
		case <-time.After(time.Minute):
			t.Fatal("Done was not closed a minute after the deadline")
		}
		assert.ErrorIs(t, c.Err(), context.DeadlineExceeded)
		assert.False(t, c.timer.Stop(), "the timer fired")
	})
	t.Run("call ends before its deadline", func(t *testing.T) {
		c := newCallCtx(time.Now().Add(time.Hour))
		assert.NoError(t, c.Err())
		assert.Nil(t, c.timer, "no timer before Done is asked for")
		done := c.Done()
		require.NotNil(t, c.timer, "Done arms the timer")
		assert.False(t, closed(done))
		c.end(context.Canceled)
		assert.True(t, closed(done), "ending the call closes Done")
		assert.ErrorIs(t, c.Err(), context.Canceled)
		assert.False(t, c.timer.Stop(), "ending the call stopped the timer")
		assert.True(t, closed(c.Done()))
	})
	t.Run("no deadline", func(t *testing.T) {
		c := newCallCtx(time.Time{})
		_, ok := c.Deadline()
		assert.False(t, ok)
		done := c.Done()
		assert.Nil(t, c.timer, "no deadline, no timer")
		assert.NoError(t, c.Err())
		assert.False(t, closed(done))
		c.end(context.Canceled)
		assert.True(t, closed(done))
		assert.ErrorIs(t, c.Err(), context.Canceled)
	})
	t.Run("child contexts follow it", func(t *testing.T) {
		c := newCallCtx(time.Now().Add(time.Hour))
		child, cancel := context.WithCancel(c)
		defer cancel()
		c.end(context.Canceled)
		select {
		case <-child.Done():
		case <-time.After(time.Minute):
			t.Fatal("the child context was not canceled a minute after its parent")
		}
		assert.ErrorIs(t, child.Err(), context.Canceled)
		assert.Nil(t, c.Value("anything"))
	})
}
