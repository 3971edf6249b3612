package conformance

import (
	"context"
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
		checkPollUnknown,
		checkReleaseRunning,
		checkReleaseTwice,
		checkIDsNeverReused,
		checkBusyInUse,
		checkBadArguments,
		checkCloseRefused,
		checkConcurrent,
		checkDataSizes,
		checkManyDescriptors,
		checkSeveralPeers,
		checkPostNeverWaits,
		checkCancelFreesNothing,
		checkCancelAsDescribed,
		checkNotificationsOnce,
		checkNotificationWithPost,
		checkPeerLoss,
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

// describe starts one agent to learn what the transport claims, and stops
// it without opening it.
func describe(ctx context.Context, cfg Config) (sdk.Description, error) {
	ag, err := cfg.New(ctx)
	if err != nil {
		return sdk.Description{}, err
	}
	if ag.Stop != nil {
		defer ag.Stop()
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return ag.Transport.Describe(ctx)
}
