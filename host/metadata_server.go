package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// metadataPath is where a host serves its PeerInfo.
const metadataPath = "/v1/peer-info"

// maxPeerInfoBytes bounds what FetchPeerInfo reads from a peer.
const maxPeerInfoBytes = 1 << 20

// metadataClient fetches peer metadata; fetches are rare, so it keeps no idle
// connection (and no goroutine) behind.
var metadataClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// MetadataServer serves this host's PeerInfo to its peers over HTTP on a TCP
// listener. Its one goroutine ends with Close.
type MetadataServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

// ServeMetadata listens on addr (host:port; port 0 picks one) and serves
// what info returns at the time of each request.
func ServeMetadata(addr string, info func() (PeerInfo, error)) (*MetadataServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metadata endpoint: listen on %q: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+metadataPath, func(w http.ResponseWriter, _ *http.Request) {
		pi, err := info()
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(pi)
	})
	s := &MetadataServer{
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		ln:   ln,
		done: make(chan error, 1),
	}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Addr is the address the server listens on.
func (s *MetadataServer) Addr() string { return s.ln.Addr().String() }

// Close stops the server and waits for its goroutine.
func (s *MetadataServer) Close() error {
	err := s.srv.Close()
	if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// FetchPeerInfo asks the host at addr for its PeerInfo, within ctx.
func FetchPeerInfo(ctx context.Context, addr string) (PeerInfo, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+metadataPath, nil)
	if err != nil {
		return PeerInfo{}, fmt.Errorf("peer metadata at %s: %w", addr, err)
	}
	resp, err := metadataClient.Do(req)
	if err != nil {
		return PeerInfo{}, fmt.Errorf("peer metadata at %s: %w", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPeerInfoBytes+1))
	if err != nil {
		return PeerInfo{}, fmt.Errorf("peer metadata at %s: %w", addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		return PeerInfo{}, fmt.Errorf("peer metadata at %s: %s: %s", addr, resp.Status, body)
	}
	if len(body) > maxPeerInfoBytes {
		return PeerInfo{}, fmt.Errorf("peer metadata at %s: larger than %d bytes", addr, maxPeerInfoBytes)
	}
	var pi PeerInfo
	if err := json.Unmarshal(body, &pi); err != nil {
		return PeerInfo{}, fmt.Errorf("peer metadata at %s: %w", addr, err)
	}
	if err := pi.validate(); err != nil {
		return PeerInfo{}, fmt.Errorf("peer metadata at %s: %w", addr, err)
	}
	return pi, nil
}
