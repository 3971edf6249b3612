package host

import (
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/custody-dev/custody/client"
)

// The engine socket holds at most its cap of connections: the next one is
// closed as it is accepted, counted, and logged once per burst; once a held
// connection closes, a new one is accepted again.
func TestEngineSocketRefusesConnectionsPastItsCap(t *testing.T) {
	const limit = 3
	path := filepath.Join(t.TempDir(), "engine.sock")
	var logged lockedBuffer
	ln, err := listenEngine(path, limit, hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: &logged}))
	require.NoError(t, err)
	accepted := make(chan net.Conn)
	served, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(served)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case accepted <- c:
			case <-stop:
				c.Close()
				return
			}
		}
	}()
	var held []net.Conn
	t.Cleanup(func() {
		close(stop)
		ln.Close()
		<-served
		for _, c := range held {
			c.Close()
		}
	})
	dial := func() net.Conn {
		c, err := net.Dial("unix", path)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	accept := func() net.Conn {
		select {
		case c := <-accepted:
			return c
		case <-time.After(10 * time.Second): // a bound on failure, not a synchronisation
			t.Fatal("a connection under the cap was not accepted")
			return nil
		}
	}
	// refusedAtAccept dials and waits until the host closed the connection.
	refusedAtAccept := func() {
		t.Helper()
		c := dial()
		require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second))) // bounds a failure
		_, err := c.Read(make([]byte, 1))
		require.ErrorIs(t, err, io.EOF, "the connection past the cap was not closed by the host")
		select {
		case <-accepted:
			t.Fatal("a connection past the cap was handed to the server")
		default:
		}
	}

	for range limit {
		dial()
		held = append(held, accept())
	}
	for range 3 {
		refusedAtAccept()
	}
	assert.Equal(t, uint64(3), ln.refused.Load())
	assert.Equal(t, 1, strings.Count(logged.String(), "engine_connection_cap"), "one warning per burst:\n%s", logged.String())

	require.NoError(t, held[0].Close()) // room for one
	dial()
	held[0] = accept()
	refusedAtAccept()
	assert.Equal(t, uint64(4), ln.refused.Load())
	assert.Equal(t, 2, strings.Count(logged.String(), "engine_connection_cap"), "a new burst warns again")
}

// A host serving with max_connections 1 refuses a second engine client
// while its first holds the connection, and counts it in Status.
func TestEngineSocketCapIsConfiguredAndCounted(t *testing.T) {
	th := startHost(t, "solo", 4, func(c *Config) { c.Engine.MaxConnections = 1 })
	c, err := client.Dial(th.cfg.Engine.Socket)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Status(th.ctx())
	assert.Equal(t, codes.Unavailable, status.Code(err), "a client past the cap is refused: %v", err)

	st, err := th.c.Status(th.ctx())
	require.NoError(t, err)
	assert.NotZero(t, st.GetEngineConnectionsRefused())
	assert.NotZero(t, failuresOf(t, th.h, "engine_connection_cap"), "the refusals are counted in custody_failures_total")
	assert.Equal(t, th.h.rep.incarnation(), st.GetIncarnation())
	assert.NotZero(t, st.GetIncarnation())
}

// failuresOf is custody_failures_total{type=typ} of h.
func failuresOf(t *testing.T, h *Host, typ string) float64 {
	t.Helper()
	mfs, err := h.Metrics().Registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "custody_failures_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "type" && l.GetValue() == typ {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
