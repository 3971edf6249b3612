package core

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The same inputs give the same outputs, byte for byte: every Work in the
// order it is handed out, with its ids and arguments, and every report in
// the order it is made. Go's map order and per-process hash seeds are
// random, so a Core that let either reach what it hands out would differ
// between two runs of one input sequence in the same process. The inputs
// are FuzzCoreOps's seed corpus and fixed pseudo-random sequences of its
// operations, each run twice on fresh Cores.
func TestSameInputsSameReady(t *testing.T) {
	inputs := [][]byte{
		{0x40, 0x12, 0, 1, 1, 1, 2, 1, 3, 0, 4, 1, 5, 0, 6, 1, 7, 1, 7, 2, 9, 0, 10, 3, 9, 0},
		{0x8c, 0x03, 0, 1, 1, 2, 8, 0x41, 1, 1, 10, 40, 9, 0, 9, 0, 12, 0, 0, 0, 3, 1, 5, 2, 9, 0},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 64 {
		in := make([]byte, 2+2*rng.IntN(120))
		for i := range in {
			in[i] = byte(rng.Uint32())
		}
		inputs = append(inputs, in)
	}
	for i, in := range inputs {
		first, second := replay(t, in), replay(t, in)
		require.Equal(t, first, second, "input %d (%x): two runs differ", i, in)
	}
}

// replay runs ops as FuzzCoreOps does and renders everything core handed
// out.
func replay(t *testing.T, ops []byte) string {
	var b strings.Builder
	fz := newFuzzRig(t, ops)
	record := fz.tamper
	fz.tamper = func(w Work, res *Result) {
		fmt.Fprintf(&b, "work %+v\n", w)
		record(w, res)
	}
	for len(fz.in) >= 2 {
		op, arg := fz.in[0], fz.in[1]
		fz.in = fz.in[2:]
		fz.step(op, arg)
		fmt.Fprintf(&b, "step %d %d: %+v\n", op, arg, fz.c.Stats())
	}
	fz.drain()
	fmt.Fprintf(&b, "reports %+v\n", fz.all)
	return b.String()
}
