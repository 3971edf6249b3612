package conformance

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/custody-dev/custody/sdk"
)

// checkDescribe: the description is complete, consistent and stable.
var checkDescribe = check{
	name: "contract/describe",
	doc: "Describe names the transport, speaks this contract major, claims only known values, and does not change while the agent lives: " +
		"asked --repeat (default 100) times, 8 at once, half before and half after a region is registered; a transport answering otherwise one time in ten passes with probability 0.9^repeat",
	needs: always,
	run: func(e *env) {
		a := e.agent()
		ask := func(when string) {
			e.t.Helper()
			e.parallel((e.cfg.Repeat+1)/2, func(t T, _, _ int) {
				ctx, cancel := e.callCtx()
				d, err := a.tr.Describe(ctx)
				cancel()
				if err != nil {
					t.Fatalf("Describe(agent %q) %s: %v", a.name, when, err)
				}
				if msg := describeFault(d); msg != "" {
					t.Fatalf("Describe %s: %s", when, msg)
				}
				if !reflect.DeepEqual(d, e.desc) {
					t.Fatalf("Describe %s changed for the same params: first %+v, now %+v", when, e.desc, d)
				}
			})
		}
		ask("of an opened agent")
		if e.t.Failed() {
			return
		}
		_ = a.region(4096)
		ask("after RegisterMemory")
	},
}

// describeFault says what is wrong with a description, or "".
func describeFault(d sdk.Description) string {
	switch {
	case d.Name == "":
		return "empty Name"
	case d.ContractMajor != sdk.ContractMajor:
		return fmt.Sprintf("ContractMajor %d, the suite speaks %d", d.ContractMajor, sdk.ContractMajor)
	case !slices.Contains(d.MemoryKinds, sdk.MemoryHost):
		return fmt.Sprintf("MemoryKinds %v lacks %q, which every check uses", d.MemoryKinds, sdk.MemoryHost)
	}
	switch d.CancelEffect {
	case sdk.CancelNone, sdk.CancelStops, sdk.CancelClosesPeer:
	default:
		return fmt.Sprintf("unknown CancelEffect %q", d.CancelEffect)
	}
	if d.Capabilities.Cancel != (d.CancelEffect != sdk.CancelNone) {
		return fmt.Sprintf("Capabilities.Cancel is %v but CancelEffect is %q (Cancel means: does more than %q)", d.Capabilities.Cancel, d.CancelEffect, sdk.CancelNone)
	}
	switch d.PeerLoss {
	case sdk.PeerLossReported, sdk.PeerLossProcessExits:
	default:
		return fmt.Sprintf("unknown PeerLoss %q", d.PeerLoss)
	}
	switch d.FenceScope {
	case sdk.FenceInitiated, sdk.FenceInitiatedAndIncoming:
	default:
		return fmt.Sprintf("unknown FenceScope %q", d.FenceScope)
	}
	return ""
}
