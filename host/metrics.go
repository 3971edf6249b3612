package host

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/custody-dev/custody/core"
)

// Metrics are a host's Prometheus series. Gauges are set by the owner
// goroutine from core's Stats; counters grow as events happen.
type Metrics struct {
	Registry *prometheus.Registry

	InFlight    prometheus.Gauge
	Retained    prometheus.Gauge
	Retired     prometheus.Gauge
	Quarantined prometheus.Gauge
	Failures    *prometheus.CounterVec
	Fences      prometheus.Counter
	Escalations prometheus.Counter
	Bytes       *prometheus.CounterVec
	Restarts    prometheus.Counter
	Requests    *prometheus.CounterVec
	// PoisonedPools counts the pools poisoned on every rank (rule 11);
	// always 0 on a host that decides alone.
	PoisonedPools prometheus.Gauge
}

// NewMetrics registers a host's series on a new registry.
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	g := func(name, help string) prometheus.Gauge {
		x := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "custody", Name: name, Help: help})
		r.MustRegister(x)
		return x
	}
	c := func(name, help string) prometheus.Counter {
		x := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "custody", Name: name, Help: help})
		r.MustRegister(x)
		return x
	}
	cv := func(name, help, label string) *prometheus.CounterVec {
		x := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "custody", Name: name, Help: help}, []string{label})
		r.MustRegister(x)
		return x
	}
	return &Metrics{
		Registry:      r,
		InFlight:      g("inflight_handles", "Transfer handles not yet released."),
		Retained:      g("retained_handles", "Handles still running after their session closed or their peer was removed."),
		Retired:       g("retired_peers", "Removed peers whose native resources wait for their last transfer."),
		Quarantined:   g("quarantined_blocks", "Blocks never handed back because a force-released transfer may still touch them."),
		Failures:      cv("failures_total", "Failure events by type.", "type"),
		Fences:        c("fences_total", "Transport processes killed to stop their transfers."),
		Escalations:   c("escalations_total", "Transfers held past the hold cap."),
		Bytes:         cv("bytes_moved_total", "Bytes of requests that finished successfully, by direction.", "op"),
		Restarts:      c("transport_restarts_total", "Transport processes started after a fence."),
		Requests:      cv("requests_total", "Requests reported to the engine, by outcome (on a rank of a group, the group's outcome).", "outcome"),
		PoisonedPools: g("poisoned_pools", "Pools poisoned on every rank of the group: a block of them could not be proven safe on some rank."),
	}
}

// observe sets the gauges from core's counts.
func (m *Metrics) observe(s core.Stats) {
	m.InFlight.Set(float64(s.Live))
	m.Retained.Set(float64(s.Retained))
	m.Retired.Set(float64(s.RetiredPeers))
	m.Quarantined.Set(float64(s.Quarantined))
}

// countRequest counts one request reported to the engine with outcome
// ("ok" or "failed"), and the bytes it moved (op: its direction) when it
// succeeded.
func (m *Metrics) countRequest(outcome, op string, bytes uint64) {
	m.Requests.WithLabelValues(outcome).Inc()
	switch {
	case outcome == "failed":
		m.Failures.WithLabelValues("request_failed").Inc()
	case op != "":
		m.Bytes.WithLabelValues(op).Add(float64(bytes))
	}
}
