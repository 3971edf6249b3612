// Package demo runs custody end to end the way a deployment does: a prefill
// host and a decode host, each a `custody serve` process with its own
// transport process, driven over the engine API by this process playing both
// engines. It moves random bytes by pull (decode reads, the producer is
// notified) and by push (prefill writes), with several transfer handles per
// request, while the transports inject every fault kind the fake knows, a
// transport crash included. It checks every byte of every request that
// finished, that every failed request's blocks came back invalid, and at the
// end that no block that passed its check was overwritten afterwards and
// that neither host holds anything.
//
// The negative control, UnsafeEagerRelease, configures the decode host with
// an unsafe escalation (force-release transfers after a few milliseconds
// and hand their blocks back for reuse): the audit must then find corrupted
// blocks.
package demo
