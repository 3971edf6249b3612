package host

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
)

// builtinTransports are the transports transport.name may name: the
// project builds custody-transport-NAME for each (nixl only where NIXL is
// installed).
var builtinTransports = []string{"fake", "ucx", "nixl"}

// PluginPath resolves the transport binary of a TransportConfig: its Path,
// else custody-transport-NAME next to the running executable, else on PATH.
func PluginPath(tc TransportConfig) (string, error) {
	if tc.Path != "" {
		return tc.Path, nil
	}
	bin := "custody-transport-" + tc.Name
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), bin)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath(bin)
	if err != nil {
		hint := "run make build or set transport.path"
		if tc.Name == "nixl" {
			hint = "make build builds it only where it finds NIXL (make test-nixl installs it from the package registries, or set NIXL_PREFIX; docs/nixl.md), or set transport.path"
		}
		return "", fmt.Errorf("config: transport.name %q: %s is neither next to this binary nor on PATH; %s", tc.Name, bin, hint)
	}
	return p, nil
}

// startTransport launches the transport process and opens its agent. On any
// error the process is killed: nothing is left running.
func startTransport(ctx context.Context, tc TransportConfig, agent string, log hclog.Logger) (*plugin.Plugin, error) {
	path, err := PluginPath(tc)
	if err != nil {
		return nil, err
	}
	var sum []byte
	if tc.SHA256 != "" {
		sum, _ = hex.DecodeString(tc.SHA256) // validated at load
	}
	// ReleaseTerminal: core releases every handle once it is terminal; the
	// plugin does it as it reports the state, which saves a round trip
	// between the processes per transfer.
	pl, err := plugin.Launch(ctx, path, plugin.LaunchOptions{Checksum: sum, Logger: log, CallTimeout: tc.CallTimeout, SocketDir: tc.socketDir, ReleaseTerminal: true})
	if err != nil {
		return nil, err
	}
	if err := pl.Open(ctx, sdk.OpenRequest{Agent: agent, Params: tc.Params}); err != nil {
		_ = pl.Kill()
		return nil, fmt.Errorf("open transport %s as agent %q: %w", path, agent, err)
	}
	return pl, nil
}

// process is a running transport process: the contract, and what fencing
// needs (sdk/plugin's Plugin).
type process interface {
	sdk.Transport
	Kill() error
	Stop()
	Exited() <-chan struct{}
	Pid() int
}

// fence kills the transport process, so every transfer it initiated stops,
// tells core the epoch is fenced and starts a new transport. It reports
// whether core was told (false: the kill failed, the epoch stays).
func (h *Host) fence(why string) bool {
	e := h.epoch
	h.log.Error("fencing transport", "failure_type", "transport_fenced", "epoch", uint64(e), "reason", why)
	h.info.Store(nil)
	if h.tp != nil {
		if err := h.tp.Kill(); err != nil {
			// Not proven dead: its registrations may live on. Keep it; the
			// next round asks again, and its exit fences it.
			h.log.Error("kill transport", "failure_type", "transport_kill_failed", "epoch", uint64(e), "error", err.Error())
			return false
		}
		h.tp, h.wake = nil, nil
	}
	h.core.Fenced(e)
	h.fences++
	h.metrics.Fences.Inc()
	// Peers are loaded again on demand: core dropped them with the epoch,
	// and a handshake still running lands in the new one.
	h.restart()
	if h.tp != nil {
		h.restarts++
		h.metrics.Restarts.Inc()
	}
	return true
}

// restart starts a transport as the next epoch; on failure it retries after
// restartBackoff, and engine calls fail meanwhile.
func (h *Host) restart() {
	if time.Now().Before(h.restartAt) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), plugin.DefaultStartTimeout)
	defer cancel()
	if err := h.start(ctx); err != nil {
		h.restartAt = time.Now().Add(restartBackoff)
		h.log.Error("start transport", "failure_type", "transport_start_failed", "error", err.Error())
	}
}

// start launches the transport as epoch h.epoch+1 and attaches it.
func (h *Host) start(ctx context.Context) error {
	next := h.epoch + 1
	h.epoch = next
	pl, err := startTransport(ctx, h.state.transportConfig(h.cfg.Transport), fmt.Sprintf("%s.%d", h.cfg.Name, next), h.log.Named("transport"))
	if err != nil {
		return err
	}
	if err := h.state.recordTransport(pl.Pid()); err != nil {
		_ = pl.Kill()
		return err
	}
	desc, err := pl.Describe(ctx)
	if err != nil {
		_ = pl.Kill()
		return fmt.Errorf("describe transport epoch %d: %w", next, err)
	}
	if err := h.checkAgreed(uint64(next), desc); err != nil {
		_ = pl.Kill()
		return err
	}
	_, events := any(pl).(sdk.EventSource)
	if err := h.core.Attach(next, desc, events); err != nil {
		_ = pl.Kill()
		h.core.Fenced(next)
		return err
	}
	h.tp, h.desc = pl, desc
	h.wake = nil
	if w, ok := any(pl).(sdk.Waker); ok && !offRings(pl) {
		h.wake = w.Wake()
	}
	// The pools are registered again in this epoch before peers may see it.
	h.absorb(h.core.Ready())
	err = h.await(ctx, func() bool { return h.poolsReady(next) })
	if err == nil && h.core.Epoch() != next {
		err = fmt.Errorf("transport epoch %d was fenced while its pools were registered", next)
	}
	if err == nil {
		err = h.publish(ctx)
	}
	if err != nil {
		// Peers could never reach this epoch: end it, so restart retries.
		_ = pl.Kill()
		h.core.Fenced(next)
		h.tp, h.wake = nil, nil
		return err
	}
	return nil
}

// poolsReady reports whether every pool is registered in epoch, or the
// epoch is gone (fenced: a pool's registration failed).
func (h *Host) poolsReady(epoch core.Epoch) bool {
	if h.core.Epoch() != epoch {
		return true
	}
	for i := range h.pools {
		if ok, _ := h.core.PoolReady(core.PoolID(i + 1)); !ok {
			return false
		}
	}
	return true
}

// publish refreshes the PeerInfo peers fetch: the transport's metadata and
// every pool's region in this epoch.
func (h *Host) publish(ctx context.Context) error {
	md, err := h.tp.LocalMetadata(ctx)
	if err != nil {
		return fmt.Errorf("publish metadata: %w", err)
	}
	pools := make([]PoolLayout, len(h.pools))
	for i, p := range h.pools {
		region, _, err := h.core.PoolRegion(core.PoolID(i + 1))
		if err != nil {
			return fmt.Errorf("publish metadata: pool %q: %w", p.name, err)
		}
		pools[i] = PoolLayout{Name: p.name, BlockSize: p.spec.BlockSize, Blocks: uint64(p.spec.Blocks), Region: uint64(region)}
	}
	h.info.Store(&PeerInfo{
		Name:          h.cfg.Name,
		Agent:         fmt.Sprintf("%s.%d", h.cfg.Name, h.epoch),
		Transport:     h.desc.Name,
		ContractMajor: h.desc.ContractMajor,
		Epoch:         uint64(h.epoch),
		Metadata:      md,
		Pools:         pools,
		Compat:        CompatHash(h.desc.Name, h.desc.ContractMajor, pools),
	})
	return nil
}

// shutdown closes core until nothing is held (bounded by closeGrace, after
// which the transport is fenced instead), then ends the transport process.
func (h *Host) shutdown() error {
	h.bgCancel()
	defer h.bg.Wait()
	defer h.state.close()
	deadline := time.Now().Add(closeGrace)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var err error
	for {
		err = h.core.Close(time.Now())
		h.absorb(h.core.Ready())
		if err == nil || !errors.Is(err, core.ErrHeld) || time.Now().After(deadline) {
			break
		}
		if h.next.Outstanding == 0 {
			h.round()
		}
		if h.next.Outstanding > 0 {
			select {
			case r := <-h.exec.results:
				h.done1(r)
			case <-ctx.Done():
			}
		} else {
			time.Sleep(maxPollBackoff) // pacing between rounds with nothing under way
		}
	}
	h.info.Store(nil)
	if h.tp == nil {
		return err
	}
	if err != nil {
		h.log.Error("close with transfers still held: fencing", "failure_type", "close_fenced", "error", err.Error())
		if kerr := h.tp.Kill(); kerr != nil {
			return fmt.Errorf("shutdown: transfers still held and the transport could not be killed: %w", kerr)
		}
		h.core.Fenced(h.epoch)
		return nil
	}
	h.tp.Stop()
	return nil
}

// offRings reports whether tp is a plugin process whose shared-memory rings
// are not attached (refused, or turned off): its Waker then only ticks, so
// the host polls while work is in flight instead, and makes no call while
// idle.
func offRings(tp any) bool {
	r, ok := tp.(plugin.RingReporter)
	return ok && !r.Rings()
}
