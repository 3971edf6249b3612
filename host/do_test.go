package host

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Once the owner took a command, its outcome reaches the caller even if the
// caller's context ends meanwhile: a report taken by GetFinished must never
// be dropped on the floor.
func TestDoWaitsForACommandTheOwnerTook(t *testing.T) {
	h := &Host{cmds: make(chan command), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	took := make(chan struct{})
	owner := make(chan struct{})
	go func() {
		defer close(owner)
		c := <-h.cmds
		close(took)
		<-ctx.Done() // the caller gave up while the owner was busy
		c.reply <- c.fn(context.Background())
	}()
	var got []string
	errc := make(chan error, 1)
	go func() {
		errc <- h.do(ctx, func(context.Context) error {
			got = append(got, "report")
			return nil
		})
	}()
	<-took
	cancel()
	require.NoError(t, <-errc, "the command ran: its result, not the caller's cancel, is the answer")
	<-owner
	assert.Equal(t, []string{"report"}, got)
}

func TestDoGivesUpBeforeTheOwnerTakesTheCommand(t *testing.T) {
	h := &Host{cmds: make(chan command), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	err := h.do(ctx, func(context.Context) error { ran = true; return nil })
	assert.ErrorIs(t, err, context.Canceled)
	assert.False(t, ran)

	close(h.done)
	assert.ErrorIs(t, h.do(context.Background(), func(context.Context) error { return nil }), ErrClosed)
}
