package agent

import (
	"context"
	"errors"
)

// Pair is two agents of one transport, each with a region of the same
// size, B loaded into A as its peer: A moves data to and from B.
type Pair struct {
	A, B *Agent
}

// NewPair starts PREFIX-a and then PREFIX-b with start as New does, and
// connects A to B. On an error nothing it made is left.
func NewPair(ctx context.Context, start Start, prefix string, params map[string]string, dir string, size uint64) (*Pair, error) {
	p := &Pair{}
	var err error
	if p.A, err = New(ctx, start, prefix+"-a", params, dir, size); err != nil {
		return nil, err
	}
	if p.B, err = New(ctx, start, prefix+"-b", params, dir, size); err != nil {
		return nil, errors.Join(err, p.Stop())
	}
	if err := p.A.Connect(ctx, p.B); err != nil {
		return nil, errors.Join(err, p.Stop())
	}
	return p, nil
}

// Stop stops A, then B (Agent.Stop).
func (p *Pair) Stop() error { return errors.Join(p.A.Stop(), p.B.Stop()) }
