package bench

import "maps"

// fakeInitiated returns params with fence=initiated added when transport is
// the fake and params name no fence, and whether it added it (params itself
// is never changed).
//
// Under fence=incoming (the fake's default) the owner of the memory performs
// every copy into and out of it: between two processes a socket round trip
// per chunk, which wakes the owner's transport process, while two agents of
// one process (an in-process reference) make a direct call. That hop is the
// simulation's cost, not custody's, and a real transport (RDMA, UCX) moves
// the bytes without the owner's CPU: the benchmarks copy as the initiator in
// every way they compare, unless asked otherwise.
func fakeInitiated(transport string, params map[string]string) (map[string]string, bool) {
	if _, set := params["fence"]; transport != "fake" || set {
		return params, false
	}
	out := maps.Clone(params)
	if out == nil {
		out = map[string]string{}
	}
	out["fence"] = "initiated"
	return out, true
}
