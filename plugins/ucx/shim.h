/* shim.h: the thin C layer between Go and UCP. Every function here runs on
 * the agent's worker thread only (the worker is UCS_THREAD_MODE_SINGLE). It
 * owns nothing Go allocates: buffers it keeps are malloc'd here and freed
 * here once UCX has completed the request that used them. */
#ifndef CUSTODY_UCX_SHIM_H
#define CUSTODY_UCX_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <ucp/api/ucp.h>

/* cu_op tracks one post (or one notification send): how many UCX requests
 * are still outstanding and the first error any of them reported. It is
 * freed only once pending is zero, so no request ever outlives it. */
typedef struct cu_op {
    int             pending;   /* outstanding UCX requests */
    ucs_status_t    status;    /* first error, UCS_OK if none */
    uint64_t        id;        /* the Go side's key */
    void           *buf;       /* malloc'd send buffer (notifications) */
    struct cu_worker *w;       /* where the op finishes */
    struct cu_op   *next;      /* link in the worker's done list */
} cu_op;

/* cu_peer is one endpoint. The error callback only records the failure;
 * the Go side reads it after progress. */
typedef struct cu_peer {
    ucp_ep_h        ep;
    int             failed;
    ucs_status_t    fail_status;
    struct cu_worker *w;
} cu_peer;

/* cu_msg is one received notification, copied out of UCX. */
typedef struct cu_msg {
    size_t          from_len;
    size_t          len;
    struct cu_msg  *next;
    char            data[];    /* from, then message */
} cu_msg;

typedef struct cu_worker {
    ucp_context_h   ctx;
    ucp_worker_h    worker;
    int             err_peer;     /* endpoints use UCP_ERR_HANDLING_MODE_PEER */
    cu_op          *done_head;    /* ops whose pending reached zero; the Go
                                     side unlinks them in place */
    cu_msg         *msg_head, *msg_tail;
    uint64_t        peer_failures;/* bumped by every endpoint error */
} cu_worker;

/* cu_open creates the context and worker, applying n UCX settings
 * (names without the UCX_ prefix, e.g. "TLS"). On failure it returns the
 * status, names the failing setting in *bad (-1 for none) and writes
 * nothing to *out. */
ucs_status_t cu_open(int n, char **keys, char **vals, int err_peer,
                     cu_worker **out, int *bad);
void cu_close(cu_worker *w);
unsigned cu_progress(cu_worker *w);
/* cu_spin progresses the worker until an op finished, a notification
 * arrived, an endpoint failed, *wake turned non-zero (the Go side queued a
 * command) or max_ns passed, and returns the events progressed: one cgo
 * call per completion, command or max_ns, not one per progress round.
 * After CU_IDLE_ROUNDS idle rounds in a row it yields the core
 * (sched_yield), for a peer process that may be waiting for it. */
unsigned cu_spin(cu_worker *w, const int32_t *wake, uint64_t max_ns);
ucs_status_t cu_address(cu_worker *w, void **addr, size_t *len);
void cu_address_release(cu_worker *w, void *addr);

ucs_status_t cu_mem_map(cu_worker *w, uint64_t addr, size_t len, ucp_mem_h *memh,
                        void **rkey, size_t *rkey_len);
void cu_rkey_buffer_release(void *rkey);
ucs_status_t cu_mem_unmap(cu_worker *w, ucp_mem_h memh);

ucs_status_t cu_peer_create(cu_worker *w, const void *addr, cu_peer **out);
ucs_status_t cu_rkey_unpack(cu_peer *p, const void *buf, ucp_rkey_h *out);
void cu_rkey_destroy(ucp_rkey_h rkey);
/* cu_peer_close starts closing the endpoint (force or flush) and returns
 * the request to wait on, or NULL when it finished at once. */
void *cu_peer_close(cu_peer *p, int force);
/* cu_request_done reports UCS_INPROGRESS while req runs; after any other
 * result the request has been freed. */
ucs_status_t cu_request_done(void *req);
void cu_peer_free(cu_peer *p);

cu_op *cu_op_new(uint64_t id);
/* cu_post issues n puts (write != 0) or gets, all counted in op->pending.
 * It stops at the first immediate error. A read op joins the done list
 * when its last request completes. A write op keeps one extra reference,
 * which cu_flush_ops drops once an endpoint flush issued after it
 * completed: a completed put only frees the source, the flush means the
 * bytes are at the destination. */
void cu_post(cu_worker *w, cu_peer *p, cu_op *op, int write, int n,
             uint64_t *laddr, uint64_t *raddr, size_t *len, ucp_rkey_h *rkey,
             ucp_mem_h *memh);
/* cu_flush_ops issues one endpoint flush on p covering the n write ops
 * posted on it before, and drops each op's extra reference when it
 * completes (at once when the flush completes immediately or fails). */
void cu_flush_ops(cu_worker *w, cu_peer *p, cu_op **ops, int n);
/* cu_send_msg sends one notification (header from, payload msg) as an
 * active message, copying both first. */
void cu_send_msg(cu_worker *w, cu_peer *p, cu_op *op, const void *from,
                 size_t from_len, const void *msg, size_t len);
void cu_op_free(cu_op *op);
cu_msg *cu_take_msg(cu_worker *w);
void cu_msg_free(cu_msg *m);
const char *cu_msg_data(const cu_msg *m); /* from, then message */

#define CU_AM_ID 7

#endif
