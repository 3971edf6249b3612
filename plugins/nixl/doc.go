// Package nixl is custody's NIXL transport: a NIXL agent (the C++ agent
// API of nixl.h, through a small extern "C" shim) in its own process behind
// the transport contract. It builds only with the nixl build tag against an
// installed NIXL; without the tag the package holds only its pure-Go parts
// and its tests say why they skip.
package nixl
