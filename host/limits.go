package host

import (
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
	"golang.org/x/sys/unix"
)

// The metadata and metrics endpoints face the network, so nothing a client
// does may hold a host resource for long or in bulk: every connection's
// idle time, header, body, read and write are bounded, and so is the number
// of connections open at once. The caps stay far under the descriptor
// limit, so that idle clients can never take the descriptors a fence or a
// transport restart needs (a pipe, a socket, a process). Connections past
// a cap wait in the kernel's accept queue, holding no descriptor of the
// host's. (The Go runtime raises the soft RLIMIT_NOFILE to the hard limit
// at start; raiseNoFile makes sure of it.)

// Bounds of the HTTP endpoints.
const (
	// maxMetadataConns and maxMetricsConns cap the connections each
	// endpoint holds open at once (lower when the descriptor limit is low:
	// connCap).
	maxMetadataConns = 256
	maxMetricsConns  = 64
	httpHeaderBytes  = 8 << 10
	httpBodyBytes    = 1 << 10 // both endpoints serve GET only
	httpReadHeader   = 5 * time.Second
	httpRead         = 10 * time.Second
	httpWrite        = 10 * time.Second
	httpIdle         = 10 * time.Second // metadata fetches keep no connection; scrapers reconnect
)

// raiseNoFile raises the soft descriptor limit to the hard one and returns
// the soft limit now in force.
func raiseNoFile() uint64 {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil {
		return 1024
	}
	if r.Cur < r.Max {
		up := r
		up.Cur = r.Max
		if unix.Setrlimit(unix.RLIMIT_NOFILE, &up) == nil {
			r = up
		}
	}
	return r.Cur
}

// connCap is want, or an eighth of the descriptor limit when that is
// lower (at least 4), so that both endpoints together hold at most a
// quarter of the host's descriptors.
func connCap(want int) int {
	n := raiseNoFile() / 8
	if n < 4 {
		n = 4
	}
	if uint64(want) > n {
		return int(n)
	}
	return want
}

// boundedListener caps the connections ln holds open at once.
func boundedListener(ln net.Listener, want int) net.Listener {
	return netutil.LimitListener(ln, connCap(want))
}

// boundedServer is an HTTP server with every per-connection bound set; its
// handler reads at most httpBodyBytes of a request body.
func boundedServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Body = http.MaxBytesReader(w, r.Body, httpBodyBytes)
			h.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: httpReadHeader,
		ReadTimeout:       httpRead,
		WriteTimeout:      httpWrite,
		IdleTimeout:       httpIdle,
		MaxHeaderBytes:    httpHeaderBytes,
	}
}
