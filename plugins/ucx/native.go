package ucx

/*
#cgo pkg-config: ucx
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/custody-dev/custody/sdk"
)

// This file is the only one that speaks cgo: small wrappers over shim.c.

// ucxVersion is the version of the UCX library this process runs on
// (ucp_get_version), e.g. "1.22.0": the one its dynamic linker loaded,
// which need not be the one it was built against.
func ucxVersion() string {
	var major, minor, release C.uint
	C.ucp_get_version(&major, &minor, &release)
	return fmt.Sprintf("%d.%d.%d", major, minor, release)
}

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

// nativeWorker is a UCP context and worker, the shim's queues and its
// progress thread. Its functions may run on any goroutine: the shim takes
// the worker's lock around every UCX call.
type nativeWorker struct {
	cw *C.cu_worker
}

// openNative creates the context and worker with the given UCX settings
// (names without the UCX_ prefix) and starts the progress thread, which
// spins for spin after the last activity before it sleeps, at most
// sleepMax at a time.
func openNative(keys, vals []string, errPeer bool, spin, sleepMax time.Duration) (*nativeWorker, error) {
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
	// ck and cv hold C pointers only, so passing them is allowed.
	st := status(C.cu_open(C.int(n), &ck[0], &cv[0], cBool(errPeer), C.uint64_t(spin), C.int(sleepMax.Milliseconds()), &cw, &bad))
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

// close stops the progress thread and frees the worker.
func (w *nativeWorker) close() {
	C.cu_close(w.cw)
	w.cw = nil
}

func (w *nativeWorker) progress() uint { return uint(C.cu_progress(w.cw)) }

// callerProgress progresses the worker on this thread until nothing more
// is ready (bounded), unless the progress thread is at it; the progress
// thread naps while a caller does so in a loop. yield: whether a call
// that leaves the work to the thread (many ops in flight) gives up the
// CPU (see cu_caller_progress).
func (w *nativeWorker) callerProgress(yield bool) uint {
	return uint(C.cu_caller_progress(w.cw, cBool(yield)))
}

// counter reads one of the shim's atomic counters in place, without a
// call into C.
func counter(p *C.uint64_t) uint64 { return (*atomic.Uint64)(unsafe.Pointer(p)).Load() }

// doneSeq counts the completions the shim ever queued.
func (w *nativeWorker) doneSeq() uint64 { return counter(&w.cw.done_seq) }

// msgSeq counts the notifications the shim ever received.
func (w *nativeWorker) msgSeq() uint64 { return counter(&w.cw.msg_seq) }

// msgLost counts the received notifications the shim could not keep.
func (w *nativeWorker) msgLost() uint64 { return counter(&w.cw.msg_lost) }

func (w *nativeWorker) peerFailures() uint64 { return counter(&w.cw.peer_failures) }

// wakeFile returns a duplicate of the shim's wake eventfd as a file in
// Go's poller; the caller closes it.
func (w *nativeWorker) wakeFile() (*os.File, error) {
	fd := int(C.cu_wake_fd(w.cw))
	if fd < 0 {
		return nil, syscall.Errno(-fd)
	}
	return os.NewFile(uintptr(fd), "ucx-wake"), nil
}

// wakeArm announces a waiter on the wake eventfd and returns the shim's
// change count, read after the announcement: any later change writes the
// eventfd.
func (w *nativeWorker) wakeArm() uint64 { return uint64(C.cu_wake_arm(w.cw)) }

// sleeping reports whether the progress thread waits in poll now.
func (w *nativeWorker) sleeping() bool {
	return (*atomic.Int32)(unsafe.Pointer(&w.cw.sleeping)).Load() != 0
}

// running is how many ops, sends and closes UCX still runs.
func (w *nativeWorker) running() int32 {
	return (*atomic.Int32)(unsafe.Pointer(&w.cw.running)).Load()
}

// threadStats are the progress thread's rounds and sleeps so far.
func (w *nativeWorker) threadStats() (rounds, sleeps uint64) {
	return counter(&w.cw.rounds), counter(&w.cw.sleeps)
}

// pauseThread stops (or resumes) the progress thread's rounds (tests).
func (w *nativeWorker) pauseThread(on bool) {
	C.cu_pause_thread(w.cw, cBool(on))
}

// failMsgAllocs makes the next n copies of received notifications fail
// as if memory ran out (tests).
func (w *nativeWorker) failMsgAllocs(n int) { C.cu_fail_msg_allocs(w.cw, C.int(n)) }

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

func (w *nativeWorker) rkeyDestroy(h C.ucp_rkey_h) { C.cu_rkey_destroy(w.cw, h) }

// closeReq is an endpoint close still running.
type closeReq struct {
	w    *nativeWorker
	peer *C.cu_peer
	req  unsafe.Pointer
}

// startClose starts closing p's endpoint. It returns a closeReq to wait on,
// or nil when the close finished at once (p is then freed).
func (w *nativeWorker) startClose(p *C.cu_peer, force bool) *closeReq {
	r := C.cu_peer_close(p, cBool(force))
	if r == nil {
		C.cu_peer_free(p)
		return nil
	}
	return &closeReq{w: w, peer: p, req: r}
}

// done reports whether the close has finished; p is freed once it has.
func (c *closeReq) done() bool {
	if status(C.cu_request_done(c.w.cw, c.req)) == statusInProgress {
		return false
	}
	C.cu_peer_free(c.peer)
	return true
}

func peerFailed(p *C.cu_peer) (bool, status) {
	return p.failed != 0, status(p.fail_status)
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

// submission is one transfer to submit: its segments are subBatch.segs
// [segOff, segOff+nseg), its notification subBatch.arena[notifOff:
// notifOff+notifLen].
type submission struct {
	id       uint64
	peer     *C.cu_peer
	write    bool
	segOff   int
	nseg     int
	notifOff int
	notifLen int
}

// subBatch collects the submissions of one Post call and hands them to
// the shim in one call, in C memory that is reused from call to call (so
// that cgo's pointer rules hold trivially and nothing is allocated per
// post). Its layout, fixed-size entries plus variable parts in side
// arrays, is a submission ring's.
type subBatch struct {
	subs  []submission
	segs  []segment
	arena []byte

	cSubs  *C.cu_sub
	cSegs  *C.cu_seg
	cArena *C.char
	capSub int
	capSeg int
	capAr  int
}

func (b *subBatch) reset() {
	b.subs, b.segs, b.arena = b.subs[:0], b.segs[:0], b.arena[:0]
}

// grow makes the C arrays hold what the batch holds.
func (b *subBatch) grow() {
	if n := len(b.subs); n > b.capSub {
		C.free(unsafe.Pointer(b.cSubs))
		b.capSub = max(n, 2*b.capSub, 16)
		b.cSubs = (*C.cu_sub)(C.malloc(C.size_t(b.capSub) * C.sizeof_cu_sub))
	}
	if n := len(b.segs); n > b.capSeg {
		C.free(unsafe.Pointer(b.cSegs))
		b.capSeg = max(n, 2*b.capSeg, 16)
		b.cSegs = (*C.cu_seg)(C.malloc(C.size_t(b.capSeg) * C.sizeof_cu_seg))
	}
	if n := len(b.arena); n > b.capAr {
		C.free(unsafe.Pointer(b.cArena))
		b.capAr = max(n, 2*b.capAr, 4096)
		b.cArena = (*C.char)(C.malloc(C.size_t(b.capAr)))
	}
}

func (b *subBatch) free() {
	C.free(unsafe.Pointer(b.cSubs))
	C.free(unsafe.Pointer(b.cSegs))
	C.free(unsafe.Pointer(b.cArena))
	*b = subBatch{}
}

// submit issues the batch (cu_submit) and reports, per submission, whether
// it was issued (false: the shim could not allocate memory for it, and
// nothing of it runs). from is the agent name notifications carry.
func (w *nativeWorker) submit(b *subBatch, from *C.char, fromLen int, ok []bool) {
	if len(b.subs) == 0 {
		return
	}
	b.grow()
	subs := unsafe.Slice(b.cSubs, len(b.subs))
	for i, s := range b.subs {
		wr := C.int32_t(0)
		if s.write {
			wr = 1
		}
		subs[i] = C.cu_sub{
			id: C.uint64_t(s.id), peer: s.peer, write: wr,
			seg_off: C.uint32_t(s.segOff), nseg: C.uint32_t(s.nseg),
			notif_off: C.uint32_t(s.notifOff), notif_len: C.uint32_t(s.notifLen),
		}
	}
	segs := unsafe.Slice(b.cSegs, max(len(b.segs), 1))
	for i, g := range b.segs {
		segs[i] = C.cu_seg{laddr: C.uint64_t(g.laddr), raddr: C.uint64_t(g.raddr), len: C.uint64_t(g.size), rkey: g.rkey, memh: g.memh}
	}
	if len(b.arena) > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(b.cArena)), len(b.arena)), b.arena)
	}
	C.cu_submit(w.cw, b.cSubs, C.int(len(b.subs)), b.cSegs, b.cArena, from, C.size_t(fromLen))
	for i := range b.subs {
		ok[i] = subs[i].ok != 0
	}
}

// sendMsg sends one notification as an active message; it completes as
// op id. It reports false when the shim could not allocate memory for it.
func (w *nativeWorker) sendMsg(p *C.cu_peer, id uint64, from *C.char, fromLen int, msg []byte) bool {
	var cm unsafe.Pointer
	if len(msg) > 0 {
		cm = C.CBytes(msg)
		defer C.free(cm)
	}
	return C.cu_send_msg(w.cw, p, C.uint64_t(id), from, C.size_t(fromLen), cm, C.size_t(len(msg))) != 0
}

// completion is one finished op, as the shim reports it.
type completion struct {
	id    uint64
	st    status
	stage int  // 0: it ended moving bytes; 1: sending the notification
	lost  bool // its notification was not sent: the peer failed
}

// doneBuf holds the shim's completions of one take, in C memory.
type doneBuf struct {
	c   *C.cu_done
	cap int
}

const doneBatch = 256

// takeDone appends the completions the shim queued, oldest first.
func (w *nativeWorker) takeDone(b *doneBuf, out []completion) []completion {
	if b.c == nil {
		b.cap = doneBatch
		b.c = (*C.cu_done)(C.malloc(C.size_t(b.cap) * C.sizeof_cu_done))
	}
	for {
		n := int(C.cu_take_done(w.cw, b.c, C.int(b.cap)))
		for _, d := range unsafe.Slice(b.c, b.cap)[:n] {
			out = append(out, completion{id: uint64(d.id), st: status(d.status), stage: int(d.stage), lost: d.lost != 0})
		}
		if n < b.cap {
			return out
		}
	}
}

func (b *doneBuf) free() {
	C.free(unsafe.Pointer(b.c))
	*b = doneBuf{}
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

// cString is a C copy of s, freed with freeCString.
func cString(s string) *C.char { return C.CString(s) }

func freeCString(p *C.char) { C.free(unsafe.Pointer(p)) }

// Aliases of the C types the rest of the package holds (only this file
// speaks cgo).
type (
	cPeer  = C.cu_peer
	cMemh  = C.ucp_mem_h
	cRkey  = C.ucp_rkey_h
	cChars = *C.char
)

// cBool is b as the shim's int flags take it.
func cBool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
