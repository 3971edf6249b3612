package conformance

import (
	"reflect"
	"slices"

	"github.com/custody-dev/custody/sdk"
)

// checkDescribe: the description is complete, consistent and stable.
var checkDescribe = check{
	name:  "contract/describe",
	doc:   "Describe names the transport, speaks this contract major, claims only known values, and does not change while the agent lives",
	needs: always,
	run: func(e *env) {
		a := e.agent()
		ctx, cancel := e.callCtx()
		defer cancel()
		d, err := a.tr.Describe(ctx)
		if err != nil {
			e.t.Fatalf("Describe(agent %q): %v", a.name, err)
		}
		if d.Name == "" {
			e.t.Errorf("Describe: empty Name")
		}
		if d.ContractMajor != sdk.ContractMajor {
			e.t.Errorf("Describe: ContractMajor %d, the suite speaks %d", d.ContractMajor, sdk.ContractMajor)
		}
		if !slices.Contains(d.MemoryKinds, sdk.MemoryHost) {
			e.t.Errorf("Describe: MemoryKinds %v lacks %q, which every check uses", d.MemoryKinds, sdk.MemoryHost)
		}
		switch d.CancelEffect {
		case sdk.CancelNone, sdk.CancelStops, sdk.CancelClosesPeer:
		default:
			e.t.Errorf("Describe: unknown CancelEffect %q", d.CancelEffect)
		}
		if d.Capabilities.Cancel != (d.CancelEffect != sdk.CancelNone) {
			e.t.Errorf("Describe: Capabilities.Cancel is %v but CancelEffect is %q (Cancel means: does more than %q)", d.Capabilities.Cancel, d.CancelEffect, sdk.CancelNone)
		}
		switch d.PeerLoss {
		case sdk.PeerLossReported, sdk.PeerLossProcessExits:
		default:
			e.t.Errorf("Describe: unknown PeerLoss %q", d.PeerLoss)
		}
		switch d.FenceScope {
		case sdk.FenceInitiated, sdk.FenceInitiatedAndIncoming:
		default:
			e.t.Errorf("Describe: unknown FenceScope %q", d.FenceScope)
		}
		if !reflect.DeepEqual(d, e.desc) {
			e.t.Errorf("Describe changed for the same params: first %+v, now %+v", e.desc, d)
		}
		_ = a.region(4096)
		again, err := a.tr.Describe(ctx)
		if err != nil {
			e.t.Fatalf("Describe(agent %q) after RegisterMemory: %v", a.name, err)
		}
		if !reflect.DeepEqual(d, again) {
			e.t.Errorf("Describe changed while the agent lived: %+v, then %+v", d, again)
		}
	},
}
