// Package ucxtls reads UCX transport lists (UCX_TLS, the tls parameter of
// the UCX and NIXL transports) for what the transports built on UCX 1.13
// must decide from them.
package ucxtls

import "strings"

// shm are the UCX 1.13 transports without a peer-failure handler (posix,
// sysv) or without an active-message path (cma), and their aliases: an
// endpoint in peer error mode cannot be built over them.
var shm = map[string]bool{"posix": true, "sysv": true, "cma": true, "sm": true, "shm": true, "mm": true, "knem": true, "xpmem": true}

// UsesShm reports whether tls names a shared-memory transport (or all
// transports, which include them).
func UsesShm(tls string) bool {
	for _, t := range strings.Split(tls, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "^")
		if t == "all" || shm[t] {
			return true
		}
	}
	return false
}
