package host

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/custody-dev/custody/host/group"
)

// Config is one host's configuration: one engine rank, one transport.
// Load validates it; every error names the field that is wrong.
type Config struct {
	// Name is this host's agent name among its peers.
	Name string `yaml:"name"`
	// Transport is the transport process the host runs.
	Transport TransportConfig `yaml:"transport"`
	// Pools are registered at start; engines may register more over the API.
	Pools []PoolConfig `yaml:"pools"`
	// Peers are the other hosts this one may connect to.
	Peers []PeerConfig `yaml:"peers"`
	// Metadata is where peers find each other.
	Metadata MetadataConfig `yaml:"metadata"`
	// Escalation bounds how long a stopped session's transfers are held.
	Escalation EscalationConfig `yaml:"escalation"`
	// Engine is the engine API's unix socket.
	Engine EngineConfig `yaml:"engine"`
	// Metrics is the Prometheus listen address (empty: off).
	Metrics MetricsConfig `yaml:"metrics"`
	// LogLevel is hclog's level: trace, debug, info, warn or error.
	LogLevel string `yaml:"log_level"`
	// StateDir is a private (0700) directory for what must outlive a host:
	// each host's record of its transport, so a restarted host fences one
	// its predecessor left behind. Default: $XDG_RUNTIME_DIR/custody, else
	// custody-<uid> in the temp directory.
	StateDir string `yaml:"state_dir"`
	// Group makes this host one rank of an engine with tensor parallelism
	// (docs/ranks.md): the engine's name, this rank, the group size and the
	// etcd the ranks agree through. Absent, or of size 1, the host decides
	// alone and needs no etcd.
	Group *group.Config `yaml:"group"`
}

// Ranked reports whether the host is one rank of a group of more than one.
func (c *Config) Ranked() bool { return c.Group != nil && c.Group.Size > 1 }

// TransportConfig names the transport plugin and its parameters.
type TransportConfig struct {
	// Name is a built-in transport (fake, ucx), found next to the custody
	// binary, unless Path is set.
	Name string `yaml:"name"`
	// Path is the plugin binary; it overrides Name's lookup.
	Path string `yaml:"path"`
	// Params are passed to the transport's Open.
	Params map[string]string `yaml:"params"`
	// SHA256 is the plugin binary's checksum (hex); when set, a binary that
	// differs is refused at launch.
	SHA256 string `yaml:"sha256"`
	// CallTimeout bounds every call to the transport.
	CallTimeout time.Duration `yaml:"call_timeout"`

	socketDir string // set by the host: where the process's socket directory goes
}

// PoolConfig is a region file cut into equal blocks.
type PoolConfig struct {
	Name      string `yaml:"name"`
	Path      string `yaml:"path"`
	BlockSize uint64 `yaml:"block_size"`
	Blocks    uint64 `yaml:"blocks"`
}

// PeerConfig is a statically known peer host.
type PeerConfig struct {
	Name string `yaml:"name"`
	// Address is the peer's metadata endpoint (host:port).
	Address string `yaml:"address"`
}

// MetadataConfig is where this host serves its metadata to peers.
type MetadataConfig struct {
	// Listen is the peer endpoint's TCP address (default 127.0.0.1:0:
	// loopback, any port). Listen on another interface only by naming it.
	Listen string `yaml:"listen"`
	// TLS is the cluster's CA and this host's certificate for mutual TLS
	// with peers. Unset, hosts on one machine use a CA custody makes in
	// state_dir/ca (trust.go).
	TLS TLSConfig `yaml:"tls"`
}

// TLSConfig names PEM files: the CA that signs every host's certificate,
// and this host's certificate (naming it by the URI SAN
// custody://peer/NAME) and key.
type TLSConfig struct {
	CA   string `yaml:"ca"`
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// EscalationConfig is the bounded hold (rule 8).
type EscalationConfig struct {
	// Cap is how long a retained or retired transfer may be held before it
	// is escalated (default 120s).
	Cap time.Duration `yaml:"cap"`
	// Policy is what escalation does: "fence" (default: kill the transport
	// process, then quarantine what the fence does not cover), or
	// "release-and-reuse" (forget the handle and reuse its blocks: unsafe
	// while a transfer may run), only when chosen.
	Policy string `yaml:"policy"`
}

// EngineConfig is the engine API's unix socket.
type EngineConfig struct {
	Socket string `yaml:"socket"`
	// MaxConnections caps the connections the socket holds open at once
	// (default DefaultEngineConnections, at most MaxEngineConnections); one
	// past the cap is closed as it is accepted, so no local client can
	// take the descriptors a fence or a transport restart needs.
	MaxConnections int `yaml:"max_connections"`
}

// MetricsConfig is the Prometheus endpoint.
type MetricsConfig struct {
	Listen string `yaml:"listen"`
}

// Escalation policies.
const (
	PolicyFence           = "fence"
	PolicyReleaseAndReuse = "release-and-reuse"
)

// DefaultCap is the bounded hold's default (rule 8).
const DefaultCap = 120 * time.Second

// Ranges of the config's durations: each is added to a clock, so each is
// bounded far from where that could overflow.
const (
	MaxCap         = 24 * time.Hour
	MaxCallTimeout = 10 * time.Minute
)

// Bounds of engine.max_connections. An engine rank needs a few connections
// (its client, a tool asking Status); the cap stays far under the
// descriptor limit.
const (
	DefaultEngineConnections = 64
	MaxEngineConnections     = 4096
)

// LoadConfig reads and validates the YAML file at path. Unknown fields are
// errors, so a misspelt key never silently falls back to a default.
func LoadConfig(path string) (*Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return ParseConfig(raw)
}

// ParseConfig decodes and validates a YAML configuration, filling defaults.
func ParseConfig(raw []byte) (*Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("config: %s%w", fieldsAt(raw, err), err)
	}
	c.defaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *Config) defaults() {
	if c.Transport.CallTimeout == 0 {
		c.Transport.CallTimeout = 10 * time.Second
	}
	if c.Escalation.Cap == 0 {
		c.Escalation.Cap = DefaultCap
	}
	if c.Escalation.Policy == "" {
		c.Escalation.Policy = PolicyFence
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.StateDir == "" {
		c.StateDir = defaultStateDir()
	}
	if c.Metadata.Listen == "" {
		c.Metadata.Listen = "127.0.0.1:0"
	}
	if c.Engine.MaxConnections == 0 {
		c.Engine.MaxConnections = DefaultEngineConnections
	}
}

// Validate checks every field and returns all problems at once, each naming
// its field.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config: %s: %s", field, fmt.Sprintf(format, args...)))
	}
	if c.Name == "" {
		bad("name", "required: this host's agent name among its peers")
	} else if err := checkName(c.Name); err != nil {
		bad("name", "%v", err)
	} else if strings.ContainsRune(c.Name, '/') || c.Name == "." || c.Name == ".." {
		bad("name", "%q: a host name names its state directory: no '/', not . or ..", c.Name)
	}
	switch {
	case c.Transport.Name == "" && c.Transport.Path == "":
		bad("transport", "required: set transport.name (fake, ucx, nixl) or transport.path")
	case c.Transport.Path != "":
		if st, err := os.Stat(c.Transport.Path); err != nil {
			bad("transport.path", "%v", err)
		} else if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
			bad("transport.path", "%s is not an executable file", c.Transport.Path)
		}
	case !slices.Contains(builtinTransports, c.Transport.Name):
		bad("transport.name", "%.256q is not a built-in transport (fake, ucx, nixl); set transport.path for another", c.Transport.Name)
	}
	if s := c.Transport.SHA256; s != "" {
		if b, err := hex.DecodeString(s); err != nil || len(b) != 32 {
			bad("transport.sha256", "want 64 hex digits, got %q", s)
		}
	}
	if c.Transport.CallTimeout <= 0 || c.Transport.CallTimeout > MaxCallTimeout {
		bad("transport.call_timeout", "%v out of range: want more than 0 and at most %v", c.Transport.CallTimeout, MaxCallTimeout)
	}
	pools := map[string]bool{}
	for i, p := range c.Pools {
		f := fmt.Sprintf("pools[%d]", i)
		switch {
		case p.Name == "":
			bad(f+".name", "required")
		case checkName(p.Name) != nil:
			bad(f+".name", "%v", checkName(p.Name))
		case pools[p.Name]:
			bad(f+".name", "pool %q is defined twice", p.Name)
		}
		pools[p.Name] = true
		if p.Path == "" {
			bad(f+".path", "required: the region file")
		}
		if err := checkPoolGeometry("config", f+".", 0, p.BlockSize, p.Blocks); err != nil {
			errs = append(errs, err)
		}
	}
	peers := map[string]bool{c.Name: true}
	for i, p := range c.Peers {
		f := fmt.Sprintf("peers[%d]", i)
		switch {
		case p.Name == "":
			bad(f+".name", "required")
		case checkName(p.Name) != nil:
			bad(f+".name", "%v", checkName(p.Name))
		case peers[p.Name]:
			bad(f+".name", "%q is this host or another peer's name", p.Name)
		}
		peers[p.Name] = true
		if p.Address == "" {
			bad(f+".address", "required: the peer's metadata endpoint host:port")
		} else if err := checkName(p.Address); err != nil {
			bad(f+".address", "%v", err)
		}
	}
	if c.Metrics.Listen != "" {
		if err := checkName(c.Metrics.Listen); err != nil {
			bad("metrics.listen", "%v", err)
		}
	}
	if c.Escalation.Cap <= 0 || c.Escalation.Cap > MaxCap {
		bad("escalation.cap", "%v out of range: want more than 0 and at most %v", c.Escalation.Cap, MaxCap)
	}
	if c.Escalation.Policy != PolicyFence && c.Escalation.Policy != PolicyReleaseAndReuse {
		bad("escalation.policy", "%q: want %q or %q", c.Escalation.Policy, PolicyFence, PolicyReleaseAndReuse)
	}
	if c.Engine.Socket == "" {
		bad("engine.socket", "required: the engine API's unix socket path")
	} else if !filepath.IsAbs(c.Engine.Socket) {
		bad("engine.socket", "%q must be an absolute path", c.Engine.Socket)
	} else if st, err := os.Stat(filepath.Dir(c.Engine.Socket)); err != nil {
		bad("engine.socket", "its directory: %v; create it or choose another path", err)
	} else if !st.IsDir() {
		bad("engine.socket", "%s is not a directory", filepath.Dir(c.Engine.Socket))
	}
	if n := c.Engine.MaxConnections; n < 1 || n > MaxEngineConnections {
		bad("engine.max_connections", "%d out of range: want 1 to %d (unset: %d)", n, MaxEngineConnections, DefaultEngineConnections)
	}
	if t := c.Metadata.TLS; (t.CA != "" || t.Cert != "" || t.Key != "") && (t.CA == "" || t.Cert == "" || t.Key == "") {
		bad("metadata.tls", "set ca, cert and key together, or none of them for the one-machine CA in state_dir")
	}
	if !filepath.IsAbs(c.StateDir) {
		bad("state_dir", "%q must be an absolute path", c.StateDir)
	}
	if c.Group != nil {
		if err := c.Group.Validate(); err != nil {
			errs = append(errs, err)
		}
		if c.Ranked() && len(c.Pools) == 0 {
			bad("pools", "required for a rank of a group of %d: the ranks agree on their pools before any transport starts, so they are configured, not registered later", c.Group.Size)
		}
	}
	switch strings.ToLower(c.LogLevel) {
	case "trace", "debug", "info", "warn", "error":
	default:
		bad("log_level", "%q: want trace, debug, info, warn or error", c.LogLevel)
	}
	return errors.Join(errs...)
}

// fieldsAt names the fields a YAML decoding error is about ("transport.
// call_timeout: "), from the lines its messages cite, so that a value of
// the wrong type or out of its type's range names its field too.
func fieldsAt(raw []byte, err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return ""
	}
	var root yaml.Node
	if yaml.Unmarshal(raw, &root) != nil {
		return ""
	}
	lines := map[int]string{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := n.Content[i].Value
				if path != "" {
					p = path + "." + p
				}
				lines[n.Content[i+1].Line] = p
				walk(n.Content[i+1], p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				lines[c.Line] = p
				walk(c, p)
			}
		}
	}
	walk(&root, "")
	var names []string
	for _, msg := range te.Errors {
		var line int
		if _, err := fmt.Sscanf(msg, "line %d:", &line); err == nil && lines[line] != "" {
			names = append(names, lines[line])
		}
	}
	if len(names) == 0 {
		return ""
	}
	return strings.Join(names, ", ") + ": "
}
