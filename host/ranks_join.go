package host

import (
	"context"
	"encoding/hex"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/custody-dev/custody/host/group"
	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
)

// joinGroup opens this host's rank group and joins it with the mode the
// host is about to run, before any transport is built (rule 9). The
// transport's part of the mode comes from a probe: the binary is launched,
// opened with the host's parameters, asked to Describe itself and killed,
// with nothing registered. Any difference between ranks fails startup on every rank,
// naming the rank and the field; on error nothing is left running.
func joinGroup(ctx context.Context, cfg *Config, st *hostState, log hclog.Logger) (*group.Group, group.Mode, error) {
	desc, err := probeTransport(ctx, st.transportConfig(cfg.Transport), cfg.Name, log)
	if err != nil {
		return nil, group.Mode{}, fmt.Errorf("rank %d of engine %q: describing the transport before joining the group: %w", cfg.Group.Rank, cfg.Group.Engine, err)
	}
	mode := modeOf(desc, cfg)
	g, err := group.Open(ctx, *cfg.Group, log)
	if err != nil {
		return nil, group.Mode{}, err
	}
	if err := g.Join(ctx, mode); err != nil {
		_ = g.Close()
		return nil, group.Mode{}, fmt.Errorf("startup refused: %w", err)
	}
	return g, mode, nil
}

// probeTransport launches the transport binary, keeps what its Describe
// answered and kills it.
func probeTransport(ctx context.Context, tc TransportConfig, agent string, log hclog.Logger) (sdk.Description, error) {
	path, err := PluginPath(tc)
	if err != nil {
		return sdk.Description{}, err
	}
	var sum []byte
	if tc.SHA256 != "" {
		sum, _ = hex.DecodeString(tc.SHA256) // validated at load
	}
	pl, err := plugin.Launch(ctx, path, plugin.LaunchOptions{Checksum: sum, Logger: log.Named("probe"), CallTimeout: tc.CallTimeout, SocketDir: tc.socketDir})
	if err != nil {
		return sdk.Description{}, err
	}
	// Opened with the host's parameters, since they may change what the
	// transport claims (a fake's fence scope); nothing is registered.
	desc, err := pl.Description(), pl.Open(ctx, sdk.OpenRequest{Agent: agent + ".probe", Params: tc.Params})
	if err == nil {
		desc, err = pl.Describe(ctx)
	}
	if kerr := pl.Kill(); err == nil && kerr != nil {
		err = fmt.Errorf("ending the probe of %s: %w", path, kerr)
	}
	return desc, err
}

// modeOf is the effective mode of a host running a transport that
// describes itself as desc.
func modeOf(desc sdk.Description, cfg *Config) group.Mode {
	pools := make([]group.PoolMode, len(cfg.Pools))
	for i, p := range cfg.Pools {
		pools[i] = group.PoolMode{Name: p.Name, BlockSize: p.BlockSize, Blocks: p.Blocks}
	}
	return group.Mode{
		Transport:        desc.Name,
		ContractMajor:    desc.ContractMajor,
		Capabilities:     group.CapabilitiesOf(desc.Capabilities),
		FenceScope:       desc.FenceScope,
		Pools:            pools,
		EscalationPolicy: cfg.Escalation.Policy,
		EscalationCap:    cfg.Escalation.Cap,
	}
}

// checkAgreed refuses a transport epoch that describes itself otherwise
// than the mode the ranks agreed on at Join (a binary replaced since, a
// parameter that changes its claims after Open).
func (h *Host) checkAgreed(epoch uint64, desc sdk.Description) error {
	if h.group == nil {
		return nil
	}
	if d := group.Diff(h.mode, modeOf(desc, h.cfg)); len(d) > 0 {
		return fmt.Errorf("transport epoch %d of rank %d describes itself otherwise than the mode the ranks agreed on: %s: agreed %s, now %s; restart every rank with the same transport",
			epoch, h.group.Rank(), d[0].Field, d[0].Want, d[0].Got)
	}
	return nil
}
