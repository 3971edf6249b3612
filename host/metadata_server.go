package host

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
)

// metadataPath is where a host serves its PeerInfo.
const metadataPath = "/v1/peer-info"

// maxPeerInfoBytes bounds what FetchPeerInfo reads from a peer.
const maxPeerInfoBytes = 1 << 20

// ErrRedirect is a peer's metadata endpoint answering with a redirect:
// never followed, since the peer asked for is the one that must answer.
var ErrRedirect = errors.New("peer metadata: the endpoint answered with a redirect; redirects are never followed")

// MetadataServer serves this host's PeerInfo to its peers over HTTPS on a
// TCP listener. Its one goroutine ends with Close.
type MetadataServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

// ServeMetadata listens on addr (host:port; port 0 picks one) and serves
// what info returns at the time of each request, over TLS as tc says (the
// host's: mutual TLS against the cluster's CA, trust.go).
func ServeMetadata(addr string, tc *tls.Config, info func() (PeerInfo, error)) (*MetadataServer, error) {
	if tc == nil {
		return nil, fmt.Errorf("metadata endpoint: no TLS configuration; peers must prove who they are")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metadata endpoint: listen on %q: %w", addr, err)
	}
	ln = tls.NewListener(boundedListener(ln, maxMetadataConns), tc)
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
		srv:  boundedServer(mux),
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

// FetchPeerInfo asks the host at addr for its PeerInfo, within ctx, over
// TLS as tc says; it believes the answer only when it comes from host name
// (the TLS configuration checks the certificate, this checks the PeerInfo).
// A redirect is refused (ErrRedirect).
func FetchPeerInfo(ctx context.Context, addr, name string, tc *tls.Config) (PeerInfo, error) {
	if tc == nil {
		return PeerInfo{}, fmt.Errorf("peer metadata at %s: no TLS configuration; peers must prove who they are", addr)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+metadataPath, nil)
	if err != nil {
		return PeerInfo{}, fmt.Errorf("peer metadata at %s: %w", addr, err)
	}
	// Fetches are rare: no connection (and no goroutine) is kept.
	tr := &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true, ResponseHeaderTimeout: handshakeTimeout}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return ErrRedirect }}
	resp, err := c.Do(req)
	if err != nil {
		return PeerInfo{}, fmt.Errorf("peer metadata at %s for host %.256q: %w", addr, name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPeerInfoBytes+1))
	if err != nil {
		return PeerInfo{}, fmt.Errorf("peer metadata at %s: %w", addr, err)
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return PeerInfo{}, fmt.Errorf("peer metadata at %s: %s: %w", addr, resp.Status, ErrRedirect)
	}
	if resp.StatusCode != http.StatusOK {
		return PeerInfo{}, fmt.Errorf("peer metadata at %s: %s: %.1024s", addr, resp.Status, body)
	}
	if len(body) > maxPeerInfoBytes {
		return PeerInfo{}, fmt.Errorf("peer metadata at %s: larger than %d bytes", addr, maxPeerInfoBytes)
	}
	pi, err := decodePeerInfo(body)
	if err != nil {
		return PeerInfo{}, fmt.Errorf("peer metadata at %s: %w", addr, err)
	}
	if pi.Name != name {
		return PeerInfo{}, fmt.Errorf("peer metadata at %s: it calls itself %.256q, not %.256q", addr, pi.Name, name)
	}
	return pi, nil
}
