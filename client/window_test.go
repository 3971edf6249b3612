package client

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"

	"github.com/custody-dev/custody/internal/h2peek"
)

// The client announces fixed flow-control windows, which turns gRPC's
// bandwidth-delay pings off: with gRPC's defaults it announces no stream
// window and keeps the protocol's 65535-byte connection window.
func TestDialSetsItsWindows(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "engine.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer ln.Close()
	c, err := Dial(sock)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	called := make(chan struct{})
	go func() {
		defer close(called)
		_, _ = c.Status(ctx) // connects; fails once the test hangs up
	}()
	defer func() { cancel(); <-called; c.Close() }()

	conn, err := ln.Accept()
	require.NoError(t, err)
	defer conn.Close()
	// Bounds a client that never speaks; it speaks at once.
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	preface := make([]byte, len(http2.ClientPreface))
	_, err = io.ReadFull(conn, preface)
	require.NoError(t, err)
	require.Equal(t, http2.ClientPreface, string(preface))
	stream, connWin, err := h2peek.Windows(conn)
	require.NoError(t, err)
	require.Equal(t, uint32(window), stream, "per-stream window announced")
	require.Equal(t, uint32(window), connWin, "connection window")
}
