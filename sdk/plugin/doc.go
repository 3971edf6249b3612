// Package plugin is the process boundary of custody's transport contract
// (package sdk): the gRPC proto that carries the contract between processes,
// Serve, which a transport binary's main calls, and Launch, which the host
// uses to start a transport process, call it and fence it by killing it.
// The shared-memory rings that carry the contract's hot path (Post,
// Release, SendNotifications, completions and received notifications)
// are package ring; this package attaches them at Open, on both sides.
//
// A transport author implements sdk.Transport and calls Serve; nothing else
// of this package is theirs to use. The host never imports a transport's
// code: it launches the binary and talks to it through Plugin, which
// implements sdk.Transport itself; transport.go lists every call and which
// way it crosses, rings or gRPC. Serve runs the plugin side of the rings
// for every transport, so a transport gets them without code of its own.
// The host launches with LaunchOptions.ReleaseTerminal: the plugin side then
// calls the transport's Release for each handle as soon as it reports the
// handle terminal, so a transport sees Release right after its own DONE,
// FAILED or CANCELED, from the pump's goroutine, as the contract allows.
// Plugin's EventsNow, NotificationsNow and ReleaseNow answer from what the
// rings already brought, without waiting on the process, so a host can make
// those calls on its own goroutine.
package plugin
