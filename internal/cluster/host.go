// Package cluster starts custody hosts as a deployment runs them, each a
// `custody serve` process with its own transport process, for the demo,
// the benchmarks and their tests: one host (StartHost), a prefill and a
// decode host connected to each other (StartPair), two engines of two
// ranks each (StartRankSet), and the embedded etcd a rank group agrees
// through (Etcd).
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/custody-dev/custody/client"
	"github.com/custody-dev/custody/host"
)

// Bounds of a host's start and stop.
const (
	startTimeout = 30 * time.Second
	stopTimeout  = 30 * time.Second
)

// Spec is what StartHost writes into a host's configuration.
type Spec struct {
	// Name is the host's name; its files in Dir are named after it.
	Name string
	// Dir holds the host's configuration, log, socket, pool and state.
	Dir string
	// Custody is the custody binary the host runs.
	Custody string
	// Transport is "fake" or "ucx" (built-in names) or the name of a
	// transport binary custody-transport-NAME next to Custody (nixl);
	// Params are its parameters.
	Transport string
	Params    map[string]string
	// Cap and Policy are the host's escalation section.
	Cap    time.Duration
	Policy string
	// Blocks of BlockSize bytes make the host's pool "kv".
	Blocks, BlockSize int
	LogLevel          string
	// Group, when set, makes the host a rank of an engine (Etcd.Group):
	// its pool "kv" is then configured, not registered over the engine
	// API.
	Group map[string]any
	// Peers, when set, is the host's static peer list (name, address).
	Peers []map[string]any
}

// Host is one `custody serve` process and an engine client for it.
type Host struct {
	Name   string
	Client *client.Client
	// Pool is the id of its pool "kv"; Path the pool's region file.
	Pool uint32
	Path string
	// MetaAddr is the host's peer metadata endpoint.
	MetaAddr string
	cmd      *exec.Cmd
	exited   chan error
	// sockets is where the host's transports make their sockets
	// (host.SocketParent): Stop removes it, which the host itself cannot
	// when it was killed.
	sockets string
}

// transportConfig is the host's transport section.
func transportConfig(s Spec) map[string]any {
	t := map[string]any{"name": s.Transport, "params": s.Params, "call_timeout": "5s"}
	if s.Transport != "fake" && s.Transport != "ucx" {
		t = map[string]any{"path": filepath.Join(filepath.Dir(s.Custody), "custody-transport-"+s.Transport), "params": s.Params, "call_timeout": "5s"}
	}
	return t
}

// freePort returns a loopback address whose port is free right now.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// StartHost writes the host's configuration and pool file, starts `custody
// serve` and waits until its engine API answers; without a Group it then
// registers the pool.
func StartHost(ctx context.Context, s Spec) (*Host, error) {
	meta, err := freePort()
	if err != nil {
		return nil, err
	}
	stateDir := filepath.Join(s.Dir, "state")
	socket := filepath.Join(s.Dir, s.Name+".sock")
	h := &Host{Name: s.Name, MetaAddr: meta, Path: filepath.Join(s.Dir, s.Name+".kv"), sockets: host.SocketParent(stateDir, s.Name)}
	if err := os.WriteFile(h.Path, nil, 0o600); err != nil {
		return nil, err
	}
	if err := os.Truncate(h.Path, int64(s.Blocks*s.BlockSize)); err != nil {
		return nil, err
	}
	cfg := map[string]any{
		"name":       s.Name,
		"transport":  transportConfig(s),
		"metadata":   map[string]any{"listen": meta},
		"escalation": map[string]any{"cap": s.Cap.String(), "policy": s.Policy},
		"engine":     map[string]any{"socket": socket},
		"log_level":  s.LogLevel,
		"state_dir":  stateDir,
	}
	if s.Peers != nil {
		cfg["peers"] = s.Peers
	}
	if s.Group != nil {
		cfg["group"] = s.Group
		cfg["pools"] = []map[string]any{{"name": "kv", "path": h.Path, "block_size": s.BlockSize, "blocks": s.Blocks}}
	}
	raw, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(s.Dir, s.Name+".yaml")
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(s.Dir, s.Name+".log"))
	if err != nil {
		return nil, err
	}
	h.cmd = exec.Command(s.Custody, "serve", "--config", cfgPath)
	h.cmd.Stdout, h.cmd.Stderr = logf, logf
	// The host dies with whatever started it (the demo, a bench), however
	// that ended: a SIGTERM, which it answers by stopping as on Stop, when
	// the thread that starts it exits. That thread is an ordinary one of
	// the Go runtime (this goroutine is not locked to it), which the
	// runtime keeps for the life of the process. Its transport then dies
	// with it (the lifeline).
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := h.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start host %s: %w", s.Name, err)
	}
	h.exited = make(chan error, 1)
	go func() { h.exited <- h.cmd.Wait(); logf.Close() }()
	if h.Client, err = client.Dial(socket); err != nil {
		h.Stop()
		return nil, err
	}
	deadline := time.Now().Add(startTimeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := h.Client.Status(cctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case werr := <-h.exited:
			h.exited <- werr
			h.Client.Close()
			return nil, fmt.Errorf("host %s exited at start (%v); see %s", s.Name, werr, logf.Name())
		default:
		}
		if time.Now().After(deadline) {
			h.Stop()
			return nil, fmt.Errorf("host %s did not answer within %v: %v; see %s", s.Name, startTimeout, err, logf.Name())
		}
		time.Sleep(20 * time.Millisecond) // waiting for a process to start listening
	}
	if s.Group != nil {
		h.Pool = 1 // the configured pool
		return h, nil
	}
	if h.Pool, err = h.Client.RegisterPool(ctx, "kv", h.Path, 0, uint64(s.BlockSize), uint32(s.Blocks)); err != nil {
		h.Stop()
		return nil, fmt.Errorf("host %s: register pool: %w", s.Name, err)
	}
	return h, nil
}

// Stop ends the host with SIGTERM (it tears down in order) and waits; a
// host that does not exit in time is killed, and that is an error. Once it
// exited, what it left of its transports' sockets (killed before, it could
// not remove them) goes.
func (h *Host) Stop() error {
	if h.Client != nil {
		h.Client.Close()
	}
	if h.cmd.Process == nil {
		return nil
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-h.exited:
		h.exited <- err
		if err != nil {
			err = fmt.Errorf("host %s exited with %v", h.Name, err)
		}
		return errors.Join(err, os.RemoveAll(h.sockets))
	case <-time.After(stopTimeout):
		_ = h.cmd.Process.Kill()
		return fmt.Errorf("host %s did not stop within %v of SIGTERM", h.Name, stopTimeout)
	}
}

// Kill ends the host process at once (SIGKILL), as a crash would.
func (h *Host) Kill() error { return h.cmd.Process.Signal(syscall.SIGKILL) }

// Pid is the host's process id (its transport process is its child).
func (h *Host) Pid() int { return h.cmd.Process.Pid }

// ReadBlocks returns the bytes of blocks of the host's pool, of bs bytes
// each.
func (h *Host) ReadBlocks(blocks []uint32, bs int) ([][]byte, error) {
	f, err := os.Open(h.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := make([][]byte, len(blocks))
	for i, b := range blocks {
		out[i] = make([]byte, bs)
		if _, err := f.ReadAt(out[i], int64(b)*int64(bs)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// WriteBlocks writes data into blocks of the host's pool, of bs bytes
// each.
func (h *Host) WriteBlocks(blocks []uint32, data [][]byte, bs int) error {
	f, err := os.OpenFile(h.Path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	for i, b := range blocks {
		if _, err := f.WriteAt(data[i], int64(b)*int64(bs)); err != nil {
			return err
		}
	}
	return nil
}
