package conformance_test

import (
	"context"
	"testing"

	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/plugins/fake"
)

// inProcess starts in-process fake agents: they cannot be killed alone,
// so the peer-loss checks skip.
func inProcess(context.Context) (conformance.Agent, error) {
	return conformance.Agent{Transport: fake.New()}, nil
}

// TestFakeInProcess holds the well-behaved in-process fake to every check.
func TestFakeInProcess(t *testing.T) {
	conformance.Run(t, conformance.Config{New: inProcess})
}
