package ucx_test

import (
	"context"
	"testing"

	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/plugins/ucx"
)

// tlsSettings are the UCX transport selections CI holds to the suite: TCP
// (peer error mode) and shared memory (posix, sysv, cma; no peer error mode).
var tlsSettings = []string{"tcp", "posix,sysv,cma"}

// TestConformanceInProcess holds in-process UCX agents to every check the
// suite has. In-process agents cannot be killed alone, so the peer-loss
// checks skip here; TestConformancePlugin runs them.
func TestConformanceInProcess(t *testing.T) {
	for _, tls := range tlsSettings {
		t.Run(tls, func(t *testing.T) {
			// Describe before Open reports the configuration of $UCX_TLS.
			t.Setenv("UCX_TLS", tls)
			conformance.Run(t, conformance.Config{
				New: func(context.Context) (conformance.Agent, error) {
					return conformance.Agent{Transport: ucx.New()}, nil
				},
				Params: map[string]string{"tls": tls},
			})
		})
	}
}
