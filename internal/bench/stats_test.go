package bench

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestGoalLine(t *testing.T) {
	var out bytes.Buffer
	goal(&out, "a", 1.5, 2, false)
	goal(&out, "b", 2.5, 2, false)
	goal(&out, "c", 0.9, 0.8, true)
	goal(&out, "d", 0.7, 0.8, true)
	assert.Equal(t, "goal name=a value=1.500 target=2 met=yes\ngoal name=b value=2.500 target=2 met=no\ngoal name=c value=0.900 target=0.8 met=yes\ngoal name=d value=0.700 target=0.8 met=no\n", out.String())
}
