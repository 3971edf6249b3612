//go:build nixl

package nixl

/*
#cgo CFLAGS: -std=c11 -O2
#cgo LDFLAGS: -lnixl_capi -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"strings"
	"time"
	"unsafe"

	"github.com/custody-dev/custody/internal/ucxtls"
	"github.com/custody-dev/custody/sdk"
)

// This file is the only one that speaks cgo: thin wrappers over shim.c,
// which calls NIXL's C API. The include and library paths come from
// CGO_CPPFLAGS and CGO_LDFLAGS, which scripts/nixl.sh sets (docs/nixl.md).

// status is a nixl_capi_status_t. The C API folds several of NIXL's
// statuses into ERROR_BACKEND (REMOTE_DISCONNECT, NOT_ALLOWED and MISMATCH
// among them); transport.go's gone and names.go say how the transport
// tells them apart.
type status int

const (
	statusInProg       status = C.NIXL_CAPI_IN_PROG
	statusSuccess      status = C.NIXL_CAPI_SUCCESS
	statusInvalidParam status = C.NIXL_CAPI_ERROR_INVALID_PARAM
	statusBackend      status = C.NIXL_CAPI_ERROR_BACKEND
	statusNotFound     status = C.NIXL_CAPI_ERROR_NOT_FOUND
)

var statusNames = map[status]string{
	statusInProg: "NIXL_CAPI_IN_PROG", statusSuccess: "NIXL_CAPI_SUCCESS",
	statusInvalidParam: "NIXL_CAPI_ERROR_INVALID_PARAM", statusBackend: "NIXL_CAPI_ERROR_BACKEND",
	C.NIXL_CAPI_ERROR_INVALID_STATE: "NIXL_CAPI_ERROR_INVALID_STATE",
	C.NIXL_CAPI_ERROR_EXCEPTION:     "NIXL_CAPI_ERROR_EXCEPTION",
	C.NIXL_CAPI_ERROR_NO_TELEMETRY:  "NIXL_CAPI_ERROR_NO_TELEMETRY",
	statusNotFound:                  "NIXL_CAPI_ERROR_NOT_FOUND",
}

func (s status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return "nixl status " + itoa(int(s))
}

func itoa(n int) string {
	if n < 0 {
		return "-" + itoa(-n)
	}
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// native is one nixlAgent with one backend.
type native struct {
	a *C.cx_agent
}

// ucxVersion says which UCX this process loaded: NIXL's UCX backend plugin
// loads it, and pluginParams's probe loads the plugin (which stays loaded).
func ucxVersion() (major, minor int, ok bool) {
	var maj, mnr, rel C.uint
	if C.cx_ucx_version(&maj, &mnr, &rel) != 0 {
		return 0, 0, false
	}
	return int(maj), int(mnr), true
}

// delay is the wait of c's progress thread: the parameter's, else over
// shared memory by the UCX NIXL's backend loads (shmProgressDelay).
func (c config) delay() time.Duration {
	if c.delaySet || c.backend != "UCX" || !ucxtls.UsesShm(c.tls) {
		return c.progressDelay
	}
	if _, _, ok := ucxVersion(); !ok {
		// Not loaded yet (parseParams probes the plugin only for its
		// parameters): load it.
		if _, err := pluginParams(c.backend); err != nil {
			return c.progressDelay
		}
	}
	return shmProgressDelay(ucxVersion())
}

// errBuf is the size of the shim's error messages.
const errBuf = 512

// openNative creates the agent and its backend with params.
func openNative(name string, delay time.Duration, backend string, params map[string]string) (*native, status, string) {
	keys := make([]*C.char, 0, len(params)+1)
	vals := make([]*C.char, 0, len(params)+1)
	for k, v := range params {
		keys = append(keys, C.CString(k))
		vals = append(vals, C.CString(v))
	}
	defer func() {
		for i := range keys {
			C.free(unsafe.Pointer(keys[i]))
			C.free(unsafe.Pointer(vals[i]))
		}
	}()
	keys, vals = append(keys, nil), append(vals, nil)
	cn, cb := C.CString(name), C.CString(backend)
	defer C.free(unsafe.Pointer(cn))
	defer C.free(unsafe.Pointer(cb))
	var out *C.cx_agent
	var msg [errBuf]C.char
	st := status(C.cx_open(cn, C.uint64_t(delay.Microseconds()), cb, C.int(len(params)), &keys[0], &vals[0], &out, &msg[0], errBuf))
	if st != statusSuccess {
		return nil, st, C.GoString(&msg[0])
	}
	return &native{a: out}, st, ""
}

// pluginParams lists the parameters the backend plugin advertises.
func pluginParams(backend string) ([]string, error) {
	cb := C.CString(backend)
	defer C.free(unsafe.Pointer(cb))
	var out *C.char
	var n C.size_t
	if st := status(C.cx_plugin_params(cb, &out, &n)); st != statusSuccess {
		return nil, sdk.Errorf(sdk.CodeInvalidArgument, "nixl: backend %q: getPluginParams returned %v; name a backend plugin of this NIXL install, e.g. backend=UCX", backend, st)
	}
	s := C.GoStringN(out, C.int(n))
	C.cx_free(unsafe.Pointer(out))
	var keys []string
	for _, line := range strings.Split(s, "\n") {
		if k, _, ok := strings.Cut(line, "="); ok && k != "" {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

func (n *native) close() { C.cx_close(n.a); n.a = nil }

func (n *native) register(addr, length uint64) status {
	return status(C.cx_register(n.a, C.uint64_t(addr), C.uint64_t(length)))
}

func (n *native) deregister(addr, length uint64) status {
	return status(C.cx_deregister(n.a, C.uint64_t(addr), C.uint64_t(length)))
}

func (n *native) localMD() ([]byte, status) {
	var p unsafe.Pointer
	var l C.size_t
	st := status(C.cx_local_md(n.a, &p, &l))
	if st != statusSuccess {
		return nil, st
	}
	b := C.GoBytes(p, C.int(l))
	C.cx_free(p)
	return b, st
}

func (n *native) loadMD(md []byte) (string, status) {
	var name [256]C.char
	p := C.CBytes(md)
	defer C.free(p)
	st := status(C.cx_load_md(n.a, p, C.size_t(len(md)), &name[0], C.size_t(len(name))))
	return C.GoString(&name[0]), st
}

func (n *native) invalidate(agent string) status {
	c := C.CString(agent)
	defer C.free(unsafe.Pointer(c))
	return status(C.cx_invalidate_md(n.a, c))
}

// prep prepares a dlist of DRAM ranges: local when agent is "", else of
// that remote agent.
func (n *native) prep(agent string, addrs, lens []uint64) (unsafe.Pointer, status) {
	var ca *C.char
	if agent != "" {
		ca = C.CString(agent)
		defer C.free(unsafe.Pointer(ca))
	}
	var h unsafe.Pointer
	st := status(C.cx_prep(n.a, ca, C.int(len(addrs)), (*C.uint64_t)(unsafe.Pointer(&addrs[0])), (*C.uint64_t)(unsafe.Pointer(&lens[0])), &h))
	return h, st
}

func (n *native) releaseDlist(h unsafe.Pointer) status {
	return status(C.cx_release_dlist(n.a, h))
}

// post makes and posts one transfer; req is set whenever a request exists,
// also after a failed post.
func (n *native) post(write bool, local unsafe.Pointer, lidx []int32, remote unsafe.Pointer, ridx []int32, notif []byte, hasNotif bool) (req unsafe.Pointer, st status) {
	op := C.int(0)
	if write {
		op = 1
	}
	var np unsafe.Pointer
	if len(notif) > 0 {
		np = unsafe.Pointer(&notif[0])
	}
	hn := C.int(0)
	if hasNotif {
		hn = 1
	}
	st = status(C.cx_post(n.a, op, local, (*C.int)(unsafe.Pointer(&lidx[0])), remote, (*C.int)(unsafe.Pointer(&ridx[0])), C.int(len(lidx)), np, C.size_t(len(notif)), hn, &req))
	return req, st
}

// statuses writes getXferStatus of each request into out.
func (n *native) statuses(reqs []unsafe.Pointer, out []int32) {
	if len(reqs) == 0 {
		return
	}
	C.cx_status(n.a, C.int(len(reqs)), &reqs[0], (*C.int)(unsafe.Pointer(&out[0])))
}

func (n *native) releaseReq(req unsafe.Pointer) status {
	return status(C.cx_release_req(n.a, req))
}

func (n *native) genNotif(agent string, msg []byte) status {
	c := C.CString(agent)
	defer C.free(unsafe.Pointer(c))
	var p unsafe.Pointer
	if len(msg) > 0 {
		p = unsafe.Pointer(&msg[0])
	}
	return status(C.cx_gen_notif(n.a, c, p, C.size_t(len(msg))))
}

// notifs drains what arrived, in order per sender.
func (n *native) notifs() ([]sdk.Notification, status) {
	var p unsafe.Pointer
	var l C.size_t
	st := status(C.cx_get_notifs(n.a, &p, &l))
	if l == 0 {
		return nil, st
	}
	b := C.GoBytes(p, C.int(l))
	C.cx_free(p)
	var out []sdk.Notification
	r := reader{b: b}
	for len(r.b) > 0 && r.err == nil {
		from := string(r.take(int(r.u32())))
		msg := r.bytes(int(r.u32()))
		if r.err == nil {
			out = append(out, sdk.Notification{From: from, Message: msg})
		}
	}
	return out, st
}
