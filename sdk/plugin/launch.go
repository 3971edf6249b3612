package plugin

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin/ring"
)

// Default launch settings.
const (
	// DefaultCallTimeout bounds every call to a transport when
	// LaunchOptions.CallTimeout is zero, so a wedged plugin never hangs the
	// host.
	DefaultCallTimeout = 10 * time.Second
	// DefaultStartTimeout bounds the start and handshake of a plugin when
	// LaunchOptions.StartTimeout is zero.
	DefaultStartTimeout = 30 * time.Second
	// killWait bounds how long Kill waits for the process to be reaped
	// after SIGKILL.
	killWait = 10 * time.Second
	// stopWait bounds a graceful Stop (go-plugin gives the process two
	// seconds to exit once asked); past it, Stop kills the process.
	stopWait = 5 * time.Second
)

// LaunchOptions tune Launch. The zero value is valid.
type LaunchOptions struct {
	// Checksum, when set, is the SHA-256 the binary must have; a binary
	// that differs is not started.
	Checksum []byte
	// Logger receives the host side's log and the plugin's stderr, entry by
	// entry. Nil means errors only, to stderr.
	Logger hclog.Logger
	// CallTimeout bounds every call to the transport (the caller's own
	// deadline applies too, whichever is sooner). Zero means
	// DefaultCallTimeout. A call that runs past it returns CodeTimeout.
	CallTimeout time.Duration
	// StartTimeout bounds the start and handshake of the process. Zero
	// means DefaultStartTimeout.
	StartTimeout time.Duration
	// SocketDir is where the process's private socket directory is made
	// (removed once the process is gone; scratch.go). Empty means the temp
	// directory.
	SocketDir string
	// DisableRings keeps the hot path (Post, Release, SendNotifications,
	// completions and notifications) on gRPC instead of
	// the shared-memory rings Open negotiates (package ring).
	DisableRings bool
	// ReleaseTerminal has the plugin release every handle it follows as
	// soon as it reports the handle terminal through the rings (DONE,
	// FAILED or CANCELED), so that the caller's Release of such a handle
	// is answered at once, without crossing to the process. A Release
	// that fails there is left to the caller's Release, as without it.
	// It leaves what Poll, Events and Cancel answer unchanged. It saves a
	// round trip between the processes per transfer; it takes the host's
	// own release out of what a conformance check sees (a lie about DONE
	// then shows only after the plugin's release), so the suite runs
	// without it.
	ReleaseTerminal bool
}

// ContractVersionError is Launch's refusal of a plugin that speaks another
// major version of the contract than this host.
type ContractVersionError struct {
	// Path is the plugin binary.
	Path string
	// Plugin is the major version the plugin speaks; Host is ContractMajor.
	Plugin, Host uint64
}

func (e *ContractVersionError) Error() string {
	return fmt.Sprintf("transport at %s speaks contract v%d; this host speaks v%d: rebuild the transport against sdk v%d",
		e.Path, e.Plugin, e.Host, e.Host)
}

// Plugin is a transport running as a separate process, launched by Launch.
// It satisfies Transport, EventSource and Waker (transport.go says which
// way each call crosses): once Open has negotiated the shared-memory
// rings, Post, Release and SendNotifications cross through them and Poll,
// Events and Notifications answer from what they brought (package ring);
// every other call, and every call when the rings are off or refused,
// crosses over gRPC. Each call runs under a deadline
// (LaunchOptions.CallTimeout) and returns the transport's own errors
// unchanged. Once the process is gone, every pending
// and every later call returns an error matching ErrPluginShutdown: the
// process was the fence, so every transfer it initiated has stopped.
//
// Call Kill to fence the transport at once, or Stop to end it gracefully;
// either way the host must call one of them to reap the process and free
// what go-plugin holds.
type Plugin struct {
	// grpc makes every call the rings do not carry.
	grpc *grpcClient
	// rings are attached by Open and detached by Close; nil: gRPC only.
	rings atomic.Pointer[ring.Client]
	// noRings and releaseTerminal are LaunchOptions.DisableRings and
	// LaunchOptions.ReleaseTerminal.
	noRings, releaseTerminal bool
	log                      hclog.Logger
	// wake is Wake's channel: the rings wake it, else fallbackTicker.
	wake chan struct{}
	// ticker paces wake-ups while no rings are attached; started by the
	// first Wake, it ends with the process (tickerExit is closed then).
	tickerOnce sync.Once
	tickerMu   sync.Mutex
	tickerExit chan struct{}

	client *plugin.Client
	cmd    *exec.Cmd
	proc   *os.Process
	desc   sdk.Description
	life   *lifeline
}

// Launch starts the transport binary at path and connects to it: gRPC
// over a unix socket with mutual TLS (the rings come at Open), after a handshake that refuses a
// plugin of another contract major version (with a *ContractVersionError
// naming both; so is one whose Describe reports another major). It calls
// Describe once and keeps the answer (Description). ctx's deadline, when
// sooner than StartTimeout, bounds the start, and ctx bounds that first
// Describe; ctx does not bound the process's life, which ends only by Kill,
// Stop or the process exiting.
func Launch(ctx context.Context, path string, opts LaunchOptions) (*Plugin, error) {
	if path == "" {
		return nil, errors.New("launch transport: empty path; give the transport binary's path")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("launch transport %s: %w", path, err)
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < opts.StartTimeout {
		opts.StartTimeout = max(time.Until(dl), time.Millisecond)
	}
	if opts.Logger == nil {
		opts.Logger = hclog.New(&hclog.LoggerOptions{Name: "custody.transport", Level: hclog.Error, Output: os.Stderr})
	}
	var secure *plugin.SecureConfig
	if len(opts.Checksum) > 0 {
		secure = &plugin.SecureConfig{Checksum: opts.Checksum, Hash: sha256.New()}
	}

	cmd := exec.Command(path)
	life, err := attachLifeline(cmd)
	if err == nil {
		life.dir, err = attachSocketDir(cmd, opts.SocketDir)
		if err != nil {
			life.cut()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("launch transport %s: %w", path, err)
	}
	binding := &grpcPlugin{timeout: opts.CallTimeout}
	stderr := &stderrTail{}
	client := plugin.NewClient(&plugin.ClientConfig{
		Stderr:           stderr,
		HandshakeConfig:  handshake(sdk.ContractMajor),
		Plugins:          plugin.PluginSet{pluginName: binding},
		Cmd:              cmd,
		SkipHostEnv:      true, // attachLifeline put it in cmd.Env
		SecureConfig:     secure,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		Logger:           opts.Logger,
		StartTimeout:     opts.StartTimeout,
		GRPCDialOptions: []grpc.DialOption{grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(maxMessageBytes), grpc.MaxCallSendMsgSize(maxMessageBytes))},
	})
	// abort ends a process that will not be used: at once, since it never
	// served the host (go-plugin's Kill would first ask it to shut down).
	abort := func() {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
			client.Kill() // never reached for a process that never started: nothing to end, nothing to log
		}
		life.cut()
	}
	if err := life.start(func() error { _, err := client.Start(); return err }); err != nil {
		abort() // and go-plugin has read the process's standard error to its end
		if why := loaderFailure(path, stderr.String()); why != "" {
			return nil, fmt.Errorf("launch transport %s: %s: %w", path, why, err)
		}
		return nil, launchError(path, err)
	}
	binding.name = fmt.Sprintf("transport at %s (pid %d)", path, cmd.Process.Pid)
	rpc, err := client.Client()
	if err != nil {
		abort()
		return nil, fmt.Errorf("launch %s: connect: %w", binding.name, err)
	}
	raw, err := rpc.Dispense(pluginName)
	if err != nil {
		abort()
		return nil, fmt.Errorf("launch %s: %w", binding.name, err)
	}
	p := &Plugin{grpc: raw.(*grpcClient), client: client, cmd: cmd, proc: cmd.Process, life: life,
		noRings: opts.DisableRings, releaseTerminal: opts.ReleaseTerminal, log: opts.Logger, wake: make(chan struct{}, 1)}
	p.grpc.exited = p.ExitState
	if p.desc, err = p.grpc.Describe(ctx); err != nil {
		abort()
		return nil, fmt.Errorf("launch %s: %w", binding.name, err)
	}
	if p.desc.ContractMajor != sdk.ContractMajor {
		abort()
		return nil, &ContractVersionError{Path: path, Plugin: uint64(p.desc.ContractMajor), Host: sdk.ContractMajor}
	}
	return p, nil
}

// launchError explains why go-plugin could not start the plugin, naming
// both versions when they differ.
func launchError(path string, err error) error {
	// go-plugin v1.8 says "incompatible API version with plugin. Plugin
	// version: N, Client versions: [...]".
	if _, after, ok := strings.Cut(err.Error(), "Plugin version: "); ok {
		v, _, _ := strings.Cut(after, ",")
		if n, perr := strconv.ParseUint(strings.TrimSpace(v), 10, 32); perr == nil {
			return &ContractVersionError{Path: path, Plugin: n, Host: sdk.ContractMajor}
		}
	}
	if errors.Is(err, plugin.ErrChecksumsDoNotMatch) {
		return fmt.Errorf("launch transport %s: its SHA-256 differs from LaunchOptions.Checksum; not started: check the binary or the checksum: %w", path, err)
	}
	return fmt.Errorf("launch transport %s: %w", path, err)
}

// Description is what the transport's Describe answered at launch. It does
// not change while the process lives.
func (p *Plugin) Description() sdk.Description { return p.desc }

// HasEvents reports whether the transport claims EventSource in Describe.
// When it does not, Events returns CodeUnsupported and the host polls.
func (p *Plugin) HasEvents() bool { return p.desc.Capabilities.Events }

// Pid is the plugin process's id.
func (p *Plugin) Pid() int { return p.proc.Pid }

// Exited is closed once the plugin process is gone (and reaped), whatever
// ended it. From then on every call returns an error matching
// ErrPluginShutdown.
func (p *Plugin) Exited() <-chan struct{} { return p.grpc.done.Done() }

// ExitState says how the process ended (exit code or signal, for logs and
// for telling a crash from a fence): nil until Exited is closed.
func (p *Plugin) ExitState() *os.ProcessState {
	select {
	case <-p.Exited():
		// go-plugin reaps the process (exec.Cmd.Wait sets ProcessState)
		// before it closes Exited, so reading it now is safe.
		return p.cmd.ProcessState
	default:
		return nil
	}
}

// Kill is the fence: it sends SIGKILL to the plugin process at once, with
// no graceful shutdown, so that every transfer the process initiated stops
// now, waits (bounded) until the process is reaped, and frees what the
// connection held. Calls pending or made after it return an error matching
// ErrPluginShutdown. Safe to call more than once, and after Stop.
func (p *Plugin) Kill() error {
	// os.Process signals through a pidfd where Linux has one, so a pid
	// reused after the process was reaped is never hit.
	if err := p.proc.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", p.grpc.name, err)
	}
	select {
	case <-p.Exited():
	case <-time.After(killWait):
		return fmt.Errorf("kill %s: the process was sent SIGKILL but was not reaped within %s; a child of it may hold its stdout or stderr open", p.grpc.name, killWait)
	}
	p.client.Kill()
	p.life.cut()
	p.closeRings()
	return nil
}

// Stop ends the plugin gracefully: it asks the process to shut down, waits
// a few seconds (stopWait at most) for it to exit and kills it if it has
// not, then frees what the connection held. Pending calls return
// ErrPluginShutdown once the process is gone. Stop does not call the
// contract's Close; the host does that first when it means to end the agent
// cleanly. Safe to call more than once, and after Kill.
func (p *Plugin) Stop() {
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		p.client.Kill()
	}()
	select {
	case <-stopped:
	case <-time.After(stopWait):
		// The process does not answer the shutdown request: fence it. Its
		// exit ends the request, and go-plugin's cleanup with it.
		_ = p.proc.Kill()
		select {
		case <-stopped:
		case <-time.After(killWait):
			// A child of the plugin holds its output open; go-plugin's
			// cleanup finishes when it lets go. The process itself is dead.
		}
	}
	p.life.cut()
	p.closeRings()
}
