package host

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"

	"github.com/custody-dev/custody/internal/h2peek"
)

// The engine API's server announces fixed flow-control windows, which turns
// gRPC's bandwidth-delay pings off: with gRPC's defaults it announces no
// stream window and keeps the protocol's 65535-byte connection window.
func TestEngineServerSetsItsWindows(t *testing.T) {
	rs := serveReports(t)
	conn, err := net.Dial("unix", rs.socket)
	require.NoError(t, err)
	defer conn.Close()
	// Bounds a server that never answers; the answer comes at once.
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = conn.Write([]byte(http2.ClientPreface))
	require.NoError(t, err)
	stream, connWin, err := h2peek.Windows(conn)
	require.NoError(t, err)
	require.Equal(t, uint32(engineWindow), stream, "per-stream window announced")
	require.Equal(t, uint32(engineWindow), connWin, "connection window")
}
