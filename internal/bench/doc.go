// Package bench is `custody bench`: each subcommand's measurement, run in
// one go with its references beside it so that one run compares like with
// like, and printed as a table and as the lines CI reads (goal, ratio).
//
//   - BW (bench bw): WRITE and READ bandwidth between two transport
//     processes against ucx_perftest.
//   - NIXL (bench nixl): custody over NIXL against NIXL driven directly,
//     and custody over UCX beside them.
//   - SDK (bench sdk): what the process boundary costs on the hot path: a
//     transport in one process, through the rings, and over gRPC.
//   - E2E (bench e2e): pulls through two custody hosts on the engine API,
//     against the transport in process and a bare gRPC round trip.
//   - Ranks (bench ranks): pulls over two engines of two ranks each,
//     coordinated through etcd against the same ranks run independently.
//
// The transport-level modes drive agents with the one measuring loop of
// package drive; the host-level modes run hosts of package cluster.
package bench
