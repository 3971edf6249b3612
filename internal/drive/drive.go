// Package drive drives a transport through sdk.Transport, with no host in
// between: the measuring loop (Post, Settle, Latencies) that every
// benchmark of a transport runs, the measurements of `custody bench sdk`
// and of the in-process reference of `custody bench e2e` (MeasureSDK,
// Pull), and the smoke copy of `custody copy`. The in-process references
// run in custody-bench-ref (cmd/benchref, Serve), a program of their own,
// so that the custody command links no transport library (the UCX
// transport's libucx).
package drive
