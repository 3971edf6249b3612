package host

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Serve runs a host for cfg until ctx ends: the transport, the engine API on
// its unix socket, the peer metadata endpoint and, when configured, metrics.
// ready, when non-nil, is called once everything listens. On the way out the
// engine API stops first, then the host tears down (rule 12), then the
// endpoints close.
func Serve(ctx context.Context, cfg *Config, log hclog.Logger, ready func(*Host)) (err error) {
	trust, err := loadTrust(cfg)
	if err != nil {
		return err
	}
	h, err := New(ctx, cfg, log)
	if err != nil {
		return err
	}
	h.trust = trust // before Run and the engine API: every fetch sees it
	runCtx, stop := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- h.Run(runCtx) }()
	defer func() {
		stop()
		err = errors.Join(err, <-runErr)
	}()

	meta, err := ServeMetadata(cfg.Metadata.Listen, trust.serverTLS(), func() (PeerInfo, error) {
		if pi, ok := h.Info(); ok {
			return pi, nil
		}
		return PeerInfo{}, ErrRestarting
	})
	if err != nil {
		return err
	}
	h.metaAddr = meta.Addr()
	defer func() { err = errors.Join(err, meta.Close()) }()
	if err := h.publishByName(ctx); err != nil {
		return fmt.Errorf("rank group directory: %w", err)
	}

	if cfg.Metrics.Listen != "" {
		mln, err := net.Listen("tcp", cfg.Metrics.Listen)
		if err != nil {
			return fmt.Errorf("metrics: listen on %q: %w", cfg.Metrics.Listen, err)
		}
		h.metrAddr = mln.Addr().String()
		mln = boundedListener(mln, maxMetricsConns)
		msrv := boundedServer(promhttp.HandlerFor(h.Metrics().Registry, promhttp.HandlerOpts{}))
		mdone := make(chan struct{})
		go func() { defer close(mdone); _ = msrv.Serve(mln) }()
		defer func() { _ = msrv.Close(); <-mdone }()
	}

	ln, err := listenEngine(cfg.Engine.Socket, cfg.Engine.MaxConnections, log)
	if err != nil {
		return err
	}
	ln.onRefuse = func() { h.metrics.Failures.WithLabelValues("engine_connection_cap").Inc() }
	h.engineLn.Store(ln)
	gs := NewEngineServer(h)
	gdone := make(chan error, 1)
	go func() { gdone <- gs.Serve(ln) }()
	defer func() {
		gs.Stop()
		<-gdone
		_ = ln.Close()
	}()

	log.Info("host serving", "name", cfg.Name, "engine_socket", cfg.Engine.Socket, "metadata", meta.Addr(), "metrics", cfg.Metrics.Listen)
	if ready != nil {
		ready(h)
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-gdone:
		gdone <- err
		return fmt.Errorf("engine API stopped: %w", err)
	}
}
