package group

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"time"
)

// Config is one rank's view of its group. Validate names every field that is
// wrong; Open validates and fills the defaults.
type Config struct {
	// Engine names the engine the ranks serve; it scopes every key the
	// group writes, so two engines may share one etcd.
	Engine string `yaml:"engine"`
	// Rank is this host's rank, 0 <= Rank < Size.
	Rank int `yaml:"rank"`
	// Size is the number of ranks (the engine's tensor-parallel size). A
	// group of size 1 needs no coordinator: every call is a local
	// passthrough and nothing is written anywhere.
	Size int `yaml:"size"`
	// Coordinator is the etcd the ranks agree through.
	Coordinator CoordinatorConfig `yaml:"coordinator"`
	// Timeouts bound every wait.
	Timeouts Timeouts `yaml:"timeouts"`
}

// CoordinatorConfig is either an etcd cluster (Endpoints, TLS) or an etcd
// embedded in rank 0's process (Embedded), never both.
type CoordinatorConfig struct {
	// Endpoints are the etcd cluster's client URLs (https://host:2379) or
	// host:port pairs.
	Endpoints []string `yaml:"endpoints"`
	// TLS secures the connection to Endpoints.
	TLS TLSConfig `yaml:"tls"`
	// Embedded runs a real single-member etcd inside rank 0's process, for
	// one machine, the demo and tests. The other ranks connect to Listen.
	Embedded *EmbeddedConfig `yaml:"embedded"`
	// MaxTxnOps is the etcd's limit on operations per transaction
	// (--max-txn-ops): DefaultMaxTxnOps for a cluster, EmbeddedMaxTxnOps
	// for the embedded etcd, which is started with it. A write's states
	// record and the deletions due go in one transaction while they fit
	// (one operation per record deleted), in more otherwise.
	MaxTxnOps int `yaml:"max_txn_ops"`
}

// TLSConfig is the client side of mutual TLS to etcd. All empty: plain TCP.
type TLSConfig struct {
	// CAFile verifies the etcd servers' certificates.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are this host's client certificate, both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName overrides the name checked in the servers' certificates.
	ServerName string `yaml:"server_name"`
}

// Enabled reports whether any TLS setting is given.
func (t TLSConfig) Enabled() bool {
	return t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != ""
}

// EmbeddedConfig is the etcd rank 0 runs in-process.
type EmbeddedConfig struct {
	// Dir is the etcd data directory (rank 0 only). Poison survives a
	// restart only as long as this directory does.
	Dir string `yaml:"dir"`
	// Listen is the client address (host:port) rank 0 serves and every
	// other rank dials. Rank 0 may use port 0 in tests; the address it got
	// is then Group.CoordinatorAddr.
	Listen string `yaml:"listen"`
}

// Timeouts bound the group's waits (rule 13). Zero means the default.
type Timeouts struct {
	// Dial bounds connecting to etcd and granting the lease at Open.
	Dial time.Duration `yaml:"dial"`
	// Op bounds each etcd call; a caller's shorter deadline wins.
	Op time.Duration `yaml:"op"`
	// Join bounds how long Join waits for every rank to publish its mode.
	Join time.Duration `yaml:"join"`
	// LeaseTTL is the membership lease: a rank whose keep-alives stop for
	// this long is reported lost. Whole seconds, at least one.
	LeaseTTL time.Duration `yaml:"lease_ttl"`
}

// Defaults of Timeouts.
const (
	DefaultDialTimeout = 5 * time.Second
	DefaultOpTimeout   = 5 * time.Second
	DefaultJoinTimeout = 60 * time.Second
	DefaultLeaseTTL    = 10 * time.Second
)

// MaxSize bounds the group size, so that every per-rank loop and payload is
// bounded too.
const MaxSize = 1024

var engineName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// withDefaults returns c with zero timeouts set to their defaults.
func (c Config) withDefaults() Config {
	if c.Timeouts.Dial == 0 {
		c.Timeouts.Dial = DefaultDialTimeout
	}
	if c.Timeouts.Op == 0 {
		c.Timeouts.Op = DefaultOpTimeout
	}
	if c.Timeouts.Join == 0 {
		c.Timeouts.Join = DefaultJoinTimeout
	}
	if c.Timeouts.LeaseTTL == 0 {
		c.Timeouts.LeaseTTL = DefaultLeaseTTL
	}
	if c.Coordinator.MaxTxnOps == 0 {
		c.Coordinator.MaxTxnOps = DefaultMaxTxnOps
		if c.Coordinator.Embedded != nil {
			c.Coordinator.MaxTxnOps = EmbeddedMaxTxnOps
		}
	}
	return c
}

// Solo reports whether the group is a single rank (no coordinator).
func (c Config) Solo() bool { return c.Size == 1 }

// Validate checks every field and returns all problems at once, each naming
// its field (under the "group" key of a host's configuration).
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config: group.%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if !engineName.MatchString(c.Engine) {
		bad("engine", "%q: want 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", c.Engine)
	}
	if c.Size < 1 || c.Size > MaxSize {
		bad("size", "%d: want 1..%d ranks", c.Size, MaxSize)
	}
	if c.Rank < 0 || (c.Size >= 1 && c.Rank >= c.Size) {
		bad("rank", "%d: want 0..size-1 (size %d)", c.Rank, c.Size)
	}
	for _, t := range []struct {
		field string
		d     time.Duration
	}{{"timeouts.dial", c.Timeouts.Dial}, {"timeouts.op", c.Timeouts.Op}, {"timeouts.join", c.Timeouts.Join}, {"timeouts.lease_ttl", c.Timeouts.LeaseTTL}} {
		if t.d < 0 {
			bad(t.field, "must be positive, got %v", t.d)
		}
	}
	if ttl := c.Timeouts.LeaseTTL; ttl != 0 && (ttl < time.Second || ttl%time.Second != 0) {
		bad("timeouts.lease_ttl", "%v: want whole seconds, at least 1s (etcd leases count seconds)", ttl)
	}
	if c.Size > 1 {
		errs = append(errs, c.Coordinator.validate(c.Rank)...)
	}
	return errors.Join(errs...)
}

func (cc CoordinatorConfig) validate(rank int) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config: group.coordinator.%s: %s", field, fmt.Sprintf(format, args...)))
	}
	switch {
	case len(cc.Endpoints) == 0 && cc.Embedded == nil:
		bad("endpoints", "required for a group of more than one rank: set endpoints (an etcd cluster) or embedded (rank 0 runs etcd)")
	case len(cc.Endpoints) > 0 && cc.Embedded != nil:
		bad("embedded", "set either endpoints or embedded, not both")
	}
	for i, ep := range cc.Endpoints {
		if err := checkEndpoint(ep); err != nil {
			bad(fmt.Sprintf("endpoints[%d]", i), "%q: %v", ep, err)
		}
	}
	if cc.MaxTxnOps != 0 && (cc.MaxTxnOps < 4 || cc.MaxTxnOps > 65536) {
		bad("max_txn_ops", "%d: want 4..65536, matching the etcd's --max-txn-ops", cc.MaxTxnOps)
	}
	if (cc.TLS.CertFile == "") != (cc.TLS.KeyFile == "") {
		bad("tls.cert_file", "cert_file and key_file go together")
	}
	if e := cc.Embedded; e != nil {
		if cc.TLS.Enabled() {
			bad("tls", "not supported with embedded: the embedded etcd serves plain TCP on loopback")
		}
		if _, _, err := net.SplitHostPort(e.Listen); err != nil {
			bad("embedded.listen", "%q: want host:port: %v", e.Listen, err)
		} else if ip := net.ParseIP(hostOf(e.Listen)); ip == nil && hostOf(e.Listen) != "localhost" {
			bad("embedded.listen", "%q: want an IP address or localhost", e.Listen)
		} else if rank != 0 && portOf(e.Listen) == "0" {
			bad("embedded.listen", "%q: ranks other than 0 dial this address; give rank 0's real port", e.Listen)
		}
		if rank == 0 && e.Dir == "" {
			bad("embedded.dir", "required on rank 0, which runs the embedded etcd")
		}
	}
	return errs
}

func checkEndpoint(ep string) error {
	if u, err := url.Parse(ep); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		if _, _, err := net.SplitHostPort(u.Host); err != nil {
			return fmt.Errorf("want scheme://host:port: %w", err)
		}
		return nil
	}
	if _, _, err := net.SplitHostPort(ep); err != nil {
		return fmt.Errorf("want http(s)://host:port or host:port: %w", err)
	}
	return nil
}

func hostOf(hp string) string { h, _, _ := net.SplitHostPort(hp); return h }
func portOf(hp string) string { _, p, _ := net.SplitHostPort(hp); return p }
