package host

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/client"
)

// TestIdleConnectionsNeverBlockAFenceOrARestart runs a `custody serve`
// host with 256 descriptors, opens 300 idle connections to each of its
// metadata and metrics endpoints (more than it has descriptors), then
// SIGKILLs its transport: the host fences it and starts another (which
// needs new descriptors: a pipe, a socket, a process), and a new engine
// client is served. Each idle connection the host closes at its timeouts is
// opened again at once, so only the caps keep descriptors free. Without the connection caps the idle clients took
// every descriptor: "pipe2: too many open files".
func TestIdleConnectionsNeverBlockAFenceOrARestart(t *testing.T) {
	const idle = 300
	dir := t.TempDir()
	meta, metrics := loopbackPort(t), loopbackPort(t)
	p := startServe(t, "idle", dir, meta, filepath.Join(dir, "state"), 4, map[string]string{"dir": dir},
		serveExtra{nofile: 256, metrics: metrics})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Each slot holds one idle connection and opens another as soon as the
	// host closes it (at its timeouts), so the pressure never lets up.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	defer func() {
		close(stop)
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	dialed := make(chan struct{}, 2*idle)
	for _, addr := range []string{meta, metrics} {
		for range idle {
			wg.Add(1)
			go func() {
				defer wg.Done()
				first := true
				for {
					c, err := net.Dial("tcp", addr)
					if err != nil {
						return
					}
					mu.Lock()
					select {
					case <-stop:
						mu.Unlock()
						c.Close()
						return
					default:
					}
					open[c] = true
					mu.Unlock()
					if first {
						dialed <- struct{}{}
						first = false
					}
					_, _ = io.Copy(io.Discard, c) // until the host (or the test) closes it
					mu.Lock()
					delete(open, c)
					mu.Unlock()
					c.Close()
				}
			}()
		}
	}
	for range 2 * idle {
		<-dialed
	}
	// A new engine client is served while the idle connections stay open.
	c2, err := client.Dial(filepath.Join(dir, "idle.sock"))
	require.NoError(t, err)
	defer c2.Close()
	st, err := c2.Status(ctx)
	require.NoError(t, err)
	require.NotZero(t, st.TransportPid)

	// A fence and a restart.
	require.NoError(t, syscall.Kill(int(st.TransportPid), syscall.SIGKILL))
	deadline := time.Now().Add(30 * time.Second)
	for {
		now, err := c2.Status(ctx)
		require.NoError(t, err)
		if now.Fences >= 1 && now.TransportPid != 0 && now.TransportPid != st.TransportPid {
			break
		}
		require.True(t, time.Now().Before(deadline), "the transport was not restarted within 30s: %+v; see the host's log above", now)
		time.Sleep(5 * time.Millisecond) // polling the host's status for the restart
	}
	// And yet another new engine client.
	c3, err := client.Dial(filepath.Join(dir, "idle.sock"))
	require.NoError(t, err)
	defer c3.Close()
	_, err = c3.Status(ctx)
	require.NoError(t, err)

	// Under all that pressure the host never ran out of descriptors, and
	// holds far fewer than it has.
	assert.NotContains(t, p.log.String(), "too many open files")
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid))
	require.NoError(t, err)
	assert.Less(t, len(fds), 128, "descriptors the host holds, of its 256")
}

// TestEndpointsBoundEveryConnection: a connection that sends nothing is
// closed (by the header timeout), an oversized header is refused, and a
// body beyond the bound is cut off.
func TestEndpointsBoundEveryConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := boundedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		}
	}))
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(boundedListener(ln, 8)) }()
	t.Cleanup(func() { // after the parallel subtests
		// Shutdown, unlike Close, waits for the connections it refused
		// to finish closing.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	})
	url := "http://" + ln.Addr().String() + "/"

	idleClosed := func(t *testing.T, request bool, bound time.Duration) {
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		br := bufio.NewReader(c)
		if request { // one request, answered, then the connection idles in keep-alive
			_, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
			require.NoError(t, err)
			resp, err := http.ReadResponse(br, nil)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
		}
		require.NoError(t, c.SetReadDeadline(time.Now().Add(bound))) // a bound on the wait, not the event
		_, err = br.ReadByte()
		require.ErrorIs(t, err, io.EOF, "the host closed the idle connection")
	}
	t.Run("silent connection closed", func(t *testing.T) {
		t.Parallel()
		idleClosed(t, false, 4*httpReadHeader)
	})
	t.Run("idle keep-alive connection closed", func(t *testing.T) {
		t.Parallel()
		idleClosed(t, true, 4*httpIdle)
	})
	t.Run("oversized header", func(t *testing.T) {
		t.Parallel()
		req, err := http.NewRequest(http.MethodGet, url, nil)
		require.NoError(t, err)
		req.Header.Set("X-Big", strings.Repeat("a", 2*httpHeaderBytes))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	})
	t.Run("oversized body", func(t *testing.T) {
		t.Parallel()
		resp, err := http.Post(url, "application/octet-stream", strings.NewReader(strings.Repeat("a", 4*httpBodyBytes)))
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	})
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
}
