package ucx

/*
#cgo pkg-config: ucx
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/custody-dev/custody/sdk"
)

// This file is the only one that speaks cgo: small wrappers over shim.c.
// Every function here must run on the agent's worker thread.

// status is a UCX status code (ucs_status_t).
type status int

const (
	statusOK         status = C.UCS_OK
	statusInProgress status = C.UCS_INPROGRESS
	statusCanceled   status = C.UCS_ERR_CANCELED
)

func (s status) String() string {
	return C.GoString(C.ucs_status_string(C.ucs_status_t(s)))
}

// code maps a UCX failure to the contract's codes: a lost connection is
// REMOTE_DISCONNECT, everything else BACKEND.
func (s status) code() sdk.Code {
	switch C.ucs_status_t(s) {
	case C.UCS_OK:
		return sdk.CodeOK
	case C.UCS_ERR_CANCELED:
		return sdk.CodeCanceled
	case C.UCS_ERR_ENDPOINT_TIMEOUT, C.UCS_ERR_CONNECTION_RESET,
		C.UCS_ERR_UNREACHABLE, C.UCS_ERR_REJECTED, C.UCS_ERR_NOT_CONNECTED,
		C.UCS_ERR_IO_ERROR, C.UCS_ERR_SHMEM_SEGMENT:
		return sdk.CodeRemoteDisconnect
	}
	return sdk.CodeBackend
}

// nativeWorker is a UCP context and worker plus the shim's queues.
type nativeWorker struct {
	cw *C.cu_worker
}

// openNative creates the context and worker with the given UCX settings
// (names without the UCX_ prefix).
func openNative(keys, vals []string, errPeer bool) (*nativeWorker, error) {
	n := len(keys)
	ck := make([]*C.char, n+1)
	cv := make([]*C.char, n+1)
	for i := range keys {
		ck[i] = C.CString(keys[i])
		cv[i] = C.CString(vals[i])
	}
	defer func() {
		for i := 0; i < n; i++ {
			C.free(unsafe.Pointer(ck[i]))
			C.free(unsafe.Pointer(cv[i]))
		}
	}()
	var cw *C.cu_worker
	var bad C.int
	ep := C.int(0)
	if errPeer {
		ep = 1
	}
	// ck and cv hold C pointers only, so passing them is allowed.
	st := status(C.cu_open(C.int(n), &ck[0], &cv[0], ep, &cw, &bad))
	if st != statusOK {
		if bad >= 0 {
			return nil, sdk.Errorf(sdk.CodeInvalidArgument, "UCX rejected setting UCX_%s=%q: %s; check the parameter", keys[bad], vals[bad], st)
		}
		code := sdk.CodeBackend
		switch C.ucs_status_t(st) {
		case C.UCS_ERR_NO_DEVICE, C.UCS_ERR_NO_ELEM, C.UCS_ERR_INVALID_PARAM, C.UCS_ERR_UNSUPPORTED:
			code = sdk.CodeInvalidArgument // the settings select nothing usable
		}
		return nil, sdk.Errorf(code, "ucx: creating the UCP context and worker: %s; check that tls names transports this host has (ucx_info -d)", st)
	}
	return &nativeWorker{cw: cw}, nil
}

func (w *nativeWorker) close() {
	C.cu_close(w.cw)
	w.cw = nil
}

func (w *nativeWorker) progress() uint { return uint(C.cu_progress(w.cw)) }

// spin progresses the worker until something completed or arrived, wake
// turned non-zero, or max passed, and returns the events progressed. wake
// is written atomically by other goroutines; it must not hold Go pointers
// (an int32 does not), as cgo requires of memory passed to C.
func (w *nativeWorker) spin(wake *atomic.Int32, max time.Duration) uint {
	return uint(C.cu_spin(w.cw, (*C.int32_t)(unsafe.Pointer(wake)), C.uint64_t(max)))
}

// hasMsg reports whether a received notification waits (no cgo call: the
// worker's fields are read in place, on its own thread).
func (w *nativeWorker) hasMsg() bool { return w.cw.msg_head != nil }

func (w *nativeWorker) peerFailures() uint64 { return uint64(w.cw.peer_failures) }

// address returns a copy of the worker's address.
func (w *nativeWorker) address() ([]byte, error) {
	var p unsafe.Pointer
	var n C.size_t
	if st := status(C.cu_address(w.cw, &p, &n)); st != statusOK {
		return nil, sdk.Errorf(sdk.CodeBackend, "reading the UCP worker address: %s", st)
	}
	b := C.GoBytes(p, C.int(n))
	C.cu_address_release(w.cw, p)
	return b, nil
}

// memMap registers [addr, addr+n) and packs its rkey.
func (w *nativeWorker) memMap(addr uintptr, n uint64) (C.ucp_mem_h, []byte, error) {
	var memh C.ucp_mem_h
	var rk unsafe.Pointer
	var rkn C.size_t
	st := status(C.cu_mem_map(w.cw, C.uint64_t(addr), C.size_t(n), &memh, &rk, &rkn))
	if st != statusOK {
		return nil, nil, fmt.Errorf("ucp_mem_map of %d bytes: %s", n, st)
	}
	b := C.GoBytes(rk, C.int(rkn))
	C.cu_rkey_buffer_release(rk)
	return memh, b, nil
}

func (w *nativeWorker) memUnmap(memh C.ucp_mem_h) status {
	return status(C.cu_mem_unmap(w.cw, memh))
}

// newPeer creates an endpoint to the worker at addr.
func (w *nativeWorker) newPeer(addr []byte) (*C.cu_peer, status) {
	ca := C.CBytes(addr)
	defer C.free(ca)
	var p *C.cu_peer
	st := status(C.cu_peer_create(w.cw, ca, &p))
	return p, st
}

func rkeyUnpack(p *C.cu_peer, rk []byte) (C.ucp_rkey_h, status) {
	cb := C.CBytes(rk)
	defer C.free(cb)
	var h C.ucp_rkey_h
	st := status(C.cu_rkey_unpack(p, cb, &h))
	return h, st
}

func rkeyDestroy(h C.ucp_rkey_h) { C.cu_rkey_destroy(h) }

// closeReq is an endpoint close still running.
type closeReq struct {
	peer *C.cu_peer
	req  unsafe.Pointer
}

// startClose starts closing p's endpoint. It returns a closeReq to wait on,
// or nil when the close finished at once (p is then freed).
func startClose(p *C.cu_peer, force bool) *closeReq {
	f := C.int(0)
	if force {
		f = 1
	}
	r := C.cu_peer_close(p, f)
	if r == nil {
		C.cu_peer_free(p)
		return nil
	}
	return &closeReq{peer: p, req: r}
}

// done reports whether the close has finished; p is freed once it has.
func (c *closeReq) done() bool {
	if status(C.cu_request_done(c.req)) == statusInProgress {
		return false
	}
	C.cu_peer_free(c.peer)
	return true
}

func peerFailed(p *C.cu_peer) (bool, status) {
	return p.failed != 0, status(p.fail_status)
}

func newOp(id uint64) *C.cu_op { return C.cu_op_new(C.uint64_t(id)) }

func opFree(op *C.cu_op) { C.cu_op_free(op) }

func opStatus(op *C.cu_op) status { return status(op.status) }

func opID(op *C.cu_op) uint64 { return uint64(op.id) }

// postScratch holds the arrays one cu_post call reads, in C memory so that
// cgo's pointer rules hold trivially and nothing is allocated per post.
type postScratch struct {
	cap   int
	laddr *C.uint64_t
	raddr *C.uint64_t
	size  *C.size_t
	rkey  *C.ucp_rkey_h
	memh  *C.ucp_mem_h
}

func (s *postScratch) ensure(n int) {
	if n <= s.cap {
		return
	}
	s.free()
	sz := C.size_t(n) * 8
	s.laddr = (*C.uint64_t)(C.malloc(sz))
	s.raddr = (*C.uint64_t)(C.malloc(sz))
	s.size = (*C.size_t)(C.malloc(sz))
	s.rkey = (*C.ucp_rkey_h)(C.malloc(sz))
	s.memh = (*C.ucp_mem_h)(C.malloc(sz))
	s.cap = n
}

func (s *postScratch) free() {
	if s.cap == 0 {
		return
	}
	C.free(unsafe.Pointer(s.laddr))
	C.free(unsafe.Pointer(s.raddr))
	C.free(unsafe.Pointer(s.size))
	C.free(unsafe.Pointer(s.rkey))
	C.free(unsafe.Pointer(s.memh))
	*s = postScratch{}
}

// segment is one contiguous piece of a post, already resolved to native
// addresses and keys.
type segment struct {
	laddr uintptr
	raddr uint64
	size  uint64
	rkey  C.ucp_rkey_h
	memh  C.ucp_mem_h
}

// post issues segs as one op on peer p.
func (w *nativeWorker) post(s *postScratch, p *C.cu_peer, op *C.cu_op, write bool, segs []segment) {
	s.ensure(len(segs))
	la := unsafe.Slice(s.laddr, len(segs))
	ra := unsafe.Slice(s.raddr, len(segs))
	sz := unsafe.Slice(s.size, len(segs))
	rk := unsafe.Slice(s.rkey, len(segs))
	mh := unsafe.Slice(s.memh, len(segs))
	for i, g := range segs {
		la[i] = C.uint64_t(g.laddr)
		ra[i] = C.uint64_t(g.raddr)
		sz[i] = C.size_t(g.size)
		rk[i] = g.rkey
		mh[i] = g.memh
	}
	wr := C.int(0)
	if write {
		wr = 1
	}
	C.cu_post(w.cw, p, op, wr, C.int(len(segs)), s.laddr, s.raddr, s.size, s.rkey, s.memh)
}

// flushOps issues one endpoint flush on p covering the write ops posted on
// it before; each op finishes once the flush completed.
func (w *nativeWorker) flushOps(p *C.cu_peer, ops []*C.cu_op) {
	// ops holds C pointers only, so passing it is allowed.
	C.cu_flush_ops(w.cw, p, &ops[0], C.int(len(ops)))
}

// sendMsg sends one notification as an active message.
func (w *nativeWorker) sendMsg(p *C.cu_peer, op *C.cu_op, from string, msg []byte) {
	cf := C.CString(from)
	defer C.free(unsafe.Pointer(cf))
	var cm unsafe.Pointer
	if len(msg) > 0 {
		cm = C.CBytes(msg)
		defer C.free(cm)
	}
	C.cu_send_msg(w.cw, p, op, unsafe.Pointer(cf), C.size_t(len(from)), cm, C.size_t(len(msg)))
}

// takeDone returns the ops whose last request completed since the last
// call. It unlinks the shim's done list in place, without a cgo call: the
// list is only touched on this thread.
func (w *nativeWorker) takeDone(out []*C.cu_op) []*C.cu_op {
	for op := w.cw.done_head; op != nil; {
		next := op.next
		op.next = nil
		out = append(out, op)
		op = next
	}
	w.cw.done_head = nil
	return out
}

// takeMsg pops one received notification.
func (w *nativeWorker) takeMsg() (from string, msg []byte, ok bool) {
	m := C.cu_take_msg(w.cw)
	if m == nil {
		return "", nil, false
	}
	data := unsafe.Pointer(C.cu_msg_data(m))
	from = C.GoStringN((*C.char)(data), C.int(m.from_len))
	msg = C.GoBytes(unsafe.Add(data, m.from_len), C.int(m.len))
	C.cu_msg_free(m)
	return from, msg, true
}

// Aliases of the C types the rest of the package holds (only this file
// speaks cgo).
type (
	cOp   = C.cu_op
	cPeer = C.cu_peer
	cMemh = C.ucp_mem_h
	cRkey = C.ucp_rkey_h
)
