package group

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"runtime/debug"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Limits on the operations of one etcd transaction (and on its
// comparisons): etcd's own default, which an external cluster keeps unless
// its operator raises --max-txn-ops, and what the embedded etcd is started
// with, so that a write's states record and many deletions of records
// fit in one transaction.
const (
	DefaultMaxTxnOps  = 128
	EmbeddedMaxTxnOps = 1024
)

// embeddedGCPercent is the garbage collector's target in a process that
// runs the embedded etcd, unless GOGC is set: etcd's write path (raft,
// WAL, apply, watch events for every rank) allocates per key written, so
// at Go's default of 100 the collector's background marking takes a
// noticeable share of that process's CPU (custody bench ranks, with
// CUSTODY_CPU_PROFILE_DIR, shows it). The live heap of a host and its etcd
// is tens of MiB, so the heap grows by a few times that between
// collections.
const embeddedGCPercent = 400

// tuneEmbeddedGC raises the process's GC target to embeddedGCPercent,
// unless the operator chose one with GOGC, or a higher one is set.
func tuneEmbeddedGC() {
	if os.Getenv("GOGC") != "" {
		return
	}
	if prev := debug.SetGCPercent(embeddedGCPercent); prev > embeddedGCPercent || prev < 0 {
		debug.SetGCPercent(prev)
	}
}

// startEmbedded runs a single-member etcd in this process, serving clients
// on listen and keeping its data in dir. It returns once the server is ready
// to serve, or fails within ctx's deadline leaving nothing running.
func startEmbedded(ctx context.Context, dir, listen string, maxOps int) (*embed.Etcd, string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", fmt.Errorf("group: embedded etcd: data directory %s: %w", dir, err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "custody"
	cfg.Dir = dir
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.MaxTxnOps = uint(maxOps)
	// Keep the revision history short: nothing reads old revisions but a
	// watch catching up, and a compacted watch resyncs.
	cfg.AutoCompactionMode = embed.CompactorModeRevision
	cfg.AutoCompactionRetention = "10000"
	client := url.URL{Scheme: "http", Host: listen}
	// The single member's peer listener takes any free loopback port:
	// there are no other members to dial it.
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("group: embedded etcd on %s (data %s): %w", listen, dir, err)
	}
	tuneEmbeddedGC()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, "", fmt.Errorf("group: embedded etcd on %s: %w", listen, err)
	case <-ctx.Done():
		e.Server.Stop()
		e.Close()
		return nil, "", fmt.Errorf("group: embedded etcd on %s not ready: %w: %w", listen, ErrCoordinator, ctx.Err())
	}
	return e, e.Clients[0].Addr().String(), nil
}

// dial makes an etcd client. It does not wait for a connection: the first
// call, bounded by its context, finds out whether etcd answers.
func dial(endpoints []string, t TLSConfig, dialTimeout time.Duration) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          dialTimeout,
		DialKeepAliveTime:    dialTimeout,
		DialKeepAliveTimeout: dialTimeout,
		Logger:               zap.NewNop(),
		MaxCallRecvMsgSize:   16 << 20,
	}
	if t.Enabled() {
		tc, err := tlsConfig(t)
		if err != nil {
			return nil, err
		}
		cfg.TLS = tc
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("group: etcd client for %v: %w", endpoints, err)
	}
	return cli, nil
}

func tlsConfig(t TLSConfig) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("config: group.coordinator.tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("config: group.coordinator.tls.ca_file: %s holds no PEM certificate", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("config: group.coordinator.tls.cert_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// isUnavailable reports whether err is gRPC's "no server answered".
func isUnavailable(err error) bool {
	s, ok := status.FromError(err)
	return ok && (s.Code() == codes.Unavailable || s.Code() == codes.DeadlineExceeded)
}
