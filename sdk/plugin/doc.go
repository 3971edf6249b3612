// Package plugin is the process boundary of custody's transport contract
// (package sdk): the gRPC proto that carries the contract between processes,
// the shared-memory rings that carry its hot path (Post, Release,
// SendNotifications, completions and received notifications; ring.go), Serve, which a transport binary's main calls, and
// Launch, which the host uses to start a transport process, call it and
// fence it by killing it.
//
// A transport author implements sdk.Transport and calls Serve; nothing else
// of this package is theirs to use. The host never imports a transport's
// code: it launches the binary and talks to it through Plugin, which
// implements sdk.Transport itself. Serve runs the plugin side of the rings
// for every transport, so a transport gets them without code of its own.
// The host launches with LaunchOptions.ReleaseTerminal: the plugin side then
// calls the transport's Release for each handle as soon as it reports the
// handle terminal, so a transport sees Release right after its own DONE,
// FAILED or CANCELED, from the pump's goroutine, as the contract allows.
// Plugin's EventsNow, NotificationsNow and ReleaseNow answer from what the
// rings already brought, without waiting on the process (transport.go), so
// a host can make those calls on its own goroutine.
package plugin
