package demo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/custody-dev/custody/client"
	"github.com/custody-dev/custody/host"
)

// hostProc is one `custody serve` process and an engine client for it.
type hostProc struct {
	name     string
	cmd      *exec.Cmd
	exited   chan error
	c        *client.Client
	socket   string
	metaAddr string
	pool     string // region file
	poolID   uint32
	blocks   int
	// sockets is where the host's transports make their sockets
	// (host.SocketParent): stop removes it, which the host itself cannot
	// when it was killed.
	sockets string
}

// hostSpec is what startHost needs to write a host's config.
type hostSpec struct {
	name      string
	dir       string
	custody   string
	transport string
	params    map[string]string
	cap       time.Duration
	policy    string
	blocks    int
	blockSize int
	logLevel  string
	// group, when set, makes the host a rank of an engine (ranks.go): its
	// pool "kv" is then configured, not registered over the engine API.
	group map[string]any
	// peers, when set, is the host's static peer list (name, address).
	peers []map[string]any
}

// transportConfig is the host's transport section. The fake and UCX are
// built-in names; other transports (nixl) are the plugin binary of that
// name next to the custody binary, by path.
func transportConfig(s hostSpec) map[string]any {
	t := map[string]any{"name": s.transport, "params": s.params, "call_timeout": "5s"}
	if s.transport != "fake" && s.transport != "ucx" {
		t = map[string]any{"path": filepath.Join(filepath.Dir(s.custody), "custody-transport-"+s.transport), "params": s.params, "call_timeout": "5s"}
	}
	return t
}

// freePort returns a loopback port free right now.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startHost writes the host's config and pool file, starts `custody serve`
// and waits until its engine API answers.
func startHost(ctx context.Context, s hostSpec) (*hostProc, error) {
	meta, err := freePort()
	if err != nil {
		return nil, err
	}
	stateDir := filepath.Join(s.dir, "state")
	h := &hostProc{name: s.name, socket: filepath.Join(s.dir, s.name+".sock"), metaAddr: meta,
		pool: filepath.Join(s.dir, s.name+".kv"), blocks: s.blocks, sockets: host.SocketParent(stateDir, s.name)}
	if err := os.WriteFile(h.pool, nil, 0o600); err != nil {
		return nil, err
	}
	if err := os.Truncate(h.pool, int64(s.blocks*s.blockSize)); err != nil {
		return nil, err
	}
	cfg := map[string]any{
		"name":       s.name,
		"transport":  transportConfig(s),
		"metadata":   map[string]any{"listen": meta},
		"escalation": map[string]any{"cap": s.cap.String(), "policy": s.policy},
		"engine":     map[string]any{"socket": h.socket},
		"log_level":  s.logLevel,
		"state_dir":  stateDir,
	}
	if s.peers != nil {
		cfg["peers"] = s.peers
	}
	if s.group != nil {
		cfg["group"] = s.group
		cfg["pools"] = []map[string]any{{"name": "kv", "path": h.pool, "block_size": s.blockSize, "blocks": s.blocks}}
	}
	raw, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(s.dir, s.name+".yaml")
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(s.dir, s.name+".log"))
	if err != nil {
		return nil, err
	}
	h.cmd = exec.Command(s.custody, "serve", "--config", cfgPath)
	h.cmd.Stdout, h.cmd.Stderr = logf, logf
	// The host dies with whatever started it (the demo, a bench), however
	// that ended: a SIGTERM, which it answers by stopping as on stop, when
	// the thread that starts it exits. That thread is an ordinary one of
	// the Go runtime (this goroutine is not locked to it), which the
	// runtime keeps for the life of the process. Its transport then dies
	// with it (the lifeline).
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := h.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start host %s: %w", s.name, err)
	}
	h.exited = make(chan error, 1)
	go func() { h.exited <- h.cmd.Wait(); logf.Close() }()
	if h.c, err = client.Dial(h.socket); err != nil {
		h.stop()
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := h.c.Status(cctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case werr := <-h.exited:
			h.exited <- werr
			h.c.Close()
			return nil, fmt.Errorf("host %s exited at start (%v); see %s", s.name, werr, logf.Name())
		default:
		}
		if time.Now().After(deadline) {
			h.stop()
			return nil, fmt.Errorf("host %s did not answer within 30s: %v; see %s", s.name, err, logf.Name())
		}
		time.Sleep(20 * time.Millisecond) // waiting for a process to start listening
	}
	if s.group != nil {
		h.poolID = 1 // the configured pool
		return h, nil
	}
	if h.poolID, err = h.c.RegisterPool(ctx, "kv", h.pool, 0, uint64(s.blockSize), uint32(s.blocks)); err != nil {
		h.stop()
		return nil, fmt.Errorf("host %s: register pool: %w", s.name, err)
	}
	return h, nil
}

// stop ends the host with SIGTERM (it tears down in order) and waits; a host
// that does not exit in time is killed, and that is an error. Once it
// exited, what it left of its transports' sockets (killed before, it could
// not remove them) goes.
func (h *hostProc) stop() error {
	if h.c != nil {
		h.c.Close()
	}
	if h.cmd.Process == nil {
		return nil
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-h.exited:
		h.exited <- err
		if err != nil {
			err = fmt.Errorf("host %s exited with %v", h.name, err)
		}
		return errors.Join(err, os.RemoveAll(h.sockets))
	case <-time.After(30 * time.Second):
		_ = h.cmd.Process.Kill()
		return fmt.Errorf("host %s did not stop within 30s of SIGTERM", h.name)
	}
}

// readBlocks returns the bytes of blocks of h's pool.
func (h *hostProc) readBlocks(blocks []uint32, bs int) ([][]byte, error) {
	f, err := os.Open(h.pool)
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

// writeBlocks writes data into blocks of h's pool.
func (h *hostProc) writeBlocks(blocks []uint32, data [][]byte, bs int) error {
	f, err := os.OpenFile(h.pool, os.O_RDWR, 0)
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

// faultParam joins fault rules into the fake's fault= parameter.
func faultParam(rules ...string) string { return strings.Join(rules, ";") }
