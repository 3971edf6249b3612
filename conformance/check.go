package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"strings"

	"github.com/custody-dev/custody/sdk"
)

// check is one conformance check. Its group is the capability it tests;
// needs says why it cannot run on a transport (empty: it runs).
type check struct {
	name  string
	doc   string
	needs func(sdk.Description) string
	run   func(e *env)
}

// group is the capability part of a check's name ("data" of "data/sizes").
func (c check) group() string {
	g, _, _ := strings.Cut(c.name, "/")
	return g
}

// allChecks lists every check in the order they run.
func allChecks() []check {
	return []check{
		checkDescribe,
		checkGate,
		checkOpenOnce,
		checkPollUnknown,
		checkReleaseRunning,
		checkReleaseTwice,
		checkTerminalStays,
		checkIDsNeverReused,
		checkBusyInUse,
		checkDlistPinned,
		checkBadArguments,
		checkCloseRefused,
		checkCloseBusyPeer,
		checkConcurrent,
		checkDataSizes,
		checkDoneMeansLanded,
		checkManyDescriptors,
		checkSeveralPeers,
		checkPostNeverWaits,
		checkCancelFreesNothing,
		checkCancelAsDescribed,
		checkCancelTerminal,
		checkCancelBound,
		checkNotificationsOnce,
		checkNotificationWithPost,
		checkNotificationNotOnFailure,
		checkPeerLoss,
		checkFenceIncoming,
		checkLimits,
		checkEventsOnce,
	}
}

// Checks returns the names of every check, in the order they run, so that
// a caller can select some with Config.Match.
func Checks() []string {
	var names []string
	for _, c := range allChecks() {
		names = append(names, c.name)
	}
	return names
}

// CheckRule is one check's name and the rule of the contract it holds a
// transport to.
type CheckRule struct {
	Name, Rule string
}

// Rules returns every check with its rule, in the order they run.
func Rules() []CheckRule {
	var out []CheckRule
	for _, c := range allChecks() {
		out = append(out, CheckRule{Name: c.name, Rule: c.doc})
	}
	return out
}

// always runs on every transport.
func always(sdk.Description) string { return "" }

// movesData runs on a transport that can move bytes between two agents or
// within one.
func movesData(d sdk.Description) string {
	if !d.Capabilities.Remote && !d.Capabilities.Local {
		return "transport claims neither Remote nor Local transfers"
	}
	return ""
}

// describe starts one agent, opens it with the configured params (which
// may change what it claims, a fake's fence for one), asks what the
// transport claims, and closes and stops it. An Open the params break is
// reported here, once, rather than by every check.
func describe(ctx context.Context, cfg Config) (sdk.Description, error) {
	ag, err := cfg.New(ctx)
	if err != nil {
		return sdk.Description{}, fmt.Errorf("start an agent: %w", err)
	}
	if ag.Stop != nil {
		defer ag.Stop()
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var salt [4]byte
	_, _ = rand.Read(salt[:])
	name := "conf-describe-" + hex.EncodeToString(salt[:])
	if err := ag.Transport.Open(ctx, sdk.OpenRequest{Agent: name, Params: maps.Clone(cfg.Params)}); err != nil {
		return sdk.Description{}, fmt.Errorf("Open(params %v): %w", cfg.Params, err)
	}
	d, err := ag.Transport.Describe(ctx)
	if err != nil {
		return d, fmt.Errorf("Describe: %w", err)
	}
	if err := ag.Transport.Close(ctx); err != nil {
		return d, fmt.Errorf("Close of an agent that holds nothing: %w", err)
	}
	return d, nil
}
