/* shim.c: see shim.h. */
#include "shim.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sched.h>

/* CU_IDLE_ROUNDS idle progress rounds in a row make cu_spin yield the core. */
#define CU_IDLE_ROUNDS 64

static void cu_op_finish(cu_worker *w, cu_op *op)
{
    op->next = w->done_head;
    w->done_head = op;
}

static void cu_op_note(cu_op *op, ucs_status_t st)
{
    if (st != UCS_OK && op->status == UCS_OK) {
        op->status = st;
    }
}

typedef struct {
    cu_worker *w;
    cu_op     *op;
} cu_cb_arg;

/* Every request's completion lands here: record its status, free the
 * request (it has completed, so nothing of it still runs) and finish the op
 * when it was the last one. The worker is found through the op's arg. */
static void cu_send_cb(void *req, ucs_status_t st, void *user_data)
{
    cu_op *op = user_data;
    cu_worker *w = op->w;
    cu_op_note(op, st);
    ucp_request_free(req);
    if (--op->pending == 0) {
        cu_op_finish(w, op);
    }
}

static ucs_status_t cu_am_cb(void *arg, const void *header, size_t header_length,
                             void *data, size_t length,
                             const ucp_am_recv_param_t *param)
{
    cu_worker *w = arg;
    cu_msg *m;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        /* Senders force eager; a rendezvous message is not ours. */
        return UCS_ERR_UNSUPPORTED;
    }
    m = malloc(sizeof(*m) + header_length + length);
    if (m == NULL) {
        return UCS_OK;
    }
    m->from_len = header_length;
    m->len = length;
    m->next = NULL;
    memcpy(m->data, header, header_length);
    memcpy(m->data + header_length, data, length);
    if (w->msg_tail) {
        w->msg_tail->next = m;
    } else {
        w->msg_head = m;
    }
    w->msg_tail = m;
    return UCS_OK;
}

ucs_status_t cu_open(int n, char **keys, char **vals, int err_peer,
                     cu_worker **out, int *bad)
{
    int i;
    ucp_config_t *cfg;
    ucp_params_t params;
    ucp_worker_params_t wp;
    ucp_am_handler_param_t ap;
    cu_worker *w;
    ucs_status_t st;

    w = calloc(1, sizeof(*w));
    if (w == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    w->err_peer = err_peer;
    st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK) {
        free(w);
        return st;
    }
    *bad = -1;
    for (i = 0; i < n; i++) {
        st = ucp_config_modify(cfg, keys[i], vals[i]);
        if (st != UCS_OK) {
            *bad = i;
            ucp_config_release(cfg);
            free(w);
            return st;
        }
    }
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM;
    st = ucp_init(&params, cfg, &w->ctx);
    ucp_config_release(cfg);
    if (st != UCS_OK) {
        free(w);
        return st;
    }
    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    st = ucp_worker_create(w->ctx, &wp, &w->worker);
    if (st != UCS_OK) {
        ucp_cleanup(w->ctx);
        free(w);
        return st;
    }
    memset(&ap, 0, sizeof(ap));
    ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                    UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    ap.id = CU_AM_ID;
    ap.flags = UCP_AM_FLAG_WHOLE_MSG;
    ap.cb = cu_am_cb;
    ap.arg = w;
    st = ucp_worker_set_am_recv_handler(w->worker, &ap);
    if (st != UCS_OK) {
        ucp_worker_destroy(w->worker);
        ucp_cleanup(w->ctx);
        free(w);
        return st;
    }
    *out = w;
    return UCS_OK;
}

void cu_close(cu_worker *w)
{
    cu_msg *m;
    while ((m = cu_take_msg(w)) != NULL) {
        free(m);
    }
    ucp_worker_destroy(w->worker);
    ucp_cleanup(w->ctx);
    free(w);
}

unsigned cu_progress(cu_worker *w)
{
    return ucp_worker_progress(w->worker);
}

static uint64_t cu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

unsigned cu_spin(cu_worker *w, const int32_t *wake, uint64_t max_ns)
{
    unsigned n = 0;
    uint64_t failures = w->peer_failures;
    uint64_t deadline = 0;
    unsigned i, idle = 0;
    for (i = 0;; i++) {
        unsigned got = ucp_worker_progress(w->worker);
        n += got;
        idle = got ? 0 : idle + 1;
        if (idle >= CU_IDLE_ROUNDS) {
            /* Waiting on the peer (its copy out of the FIFO, its reply):
             * if it shares this core, let it run now rather than at the
             * end of our time slice. Returns at once otherwise. */
            sched_yield();
            idle = 0;
        }
        if (w->done_head != NULL || w->msg_head != NULL ||
            w->peer_failures != failures ||
            __atomic_load_n(wake, __ATOMIC_ACQUIRE) != 0) {
            break;
        }
        if (i % 16 == 0) { /* the clock costs about one idle progress */
            uint64_t now = cu_now_ns();
            if (deadline == 0) {
                deadline = now + max_ns;
            } else if (now >= deadline) {
                break;
            }
        }
    }
    return n;
}

ucs_status_t cu_address(cu_worker *w, void **addr, size_t *len)
{
    return ucp_worker_get_address(w->worker, (ucp_address_t **)addr, len);
}

void cu_address_release(cu_worker *w, void *addr)
{
    ucp_worker_release_address(w->worker, addr);
}

ucs_status_t cu_mem_map(cu_worker *w, uint64_t addr, size_t len, ucp_mem_h *memh,
                        void **rkey, size_t *rkey_len)
{
    ucp_mem_map_params_t mp;
    ucs_status_t st;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = (void *)(uintptr_t)addr;
    mp.length = len;
    st = ucp_mem_map(w->ctx, &mp, memh);
    if (st != UCS_OK) {
        return st;
    }
    st = ucp_rkey_pack(w->ctx, *memh, rkey, rkey_len);
    if (st != UCS_OK) {
        ucp_mem_unmap(w->ctx, *memh);
    }
    return st;
}

void cu_rkey_buffer_release(void *rkey)
{
    ucp_rkey_buffer_release(rkey);
}

ucs_status_t cu_mem_unmap(cu_worker *w, ucp_mem_h memh)
{
    return ucp_mem_unmap(w->ctx, memh);
}

static void cu_ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t st)
{
    cu_peer *p = arg;
    (void)ep;
    if (!p->failed) {
        p->failed = 1;
        p->fail_status = st;
        p->w->peer_failures++;
    }
}

ucs_status_t cu_peer_create(cu_worker *w, const void *addr, cu_peer **out)
{
    ucp_ep_params_t ep;
    cu_peer *p;
    ucs_status_t st;

    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    p->w = w;
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address = addr;
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    if (w->err_peer) {
        ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
        ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
        ep.err_handler.cb = cu_ep_err_cb;
        ep.err_handler.arg = p;
    }
    st = ucp_ep_create(w->worker, &ep, &p->ep);
    if (st != UCS_OK) {
        free(p);
        return st;
    }
    *out = p;
    return UCS_OK;
}

ucs_status_t cu_rkey_unpack(cu_peer *p, const void *buf, ucp_rkey_h *out)
{
    return ucp_ep_rkey_unpack(p->ep, buf, out);
}

void cu_rkey_destroy(ucp_rkey_h rkey)
{
    ucp_rkey_destroy(rkey);
}

void *cu_peer_close(cu_peer *p, int force)
{
    ucp_request_param_t rp;
    memset(&rp, 0, sizeof(rp));
    if (force) {
        rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    }
    ucs_status_ptr_t r = ucp_ep_close_nbx(p->ep, &rp);
    if (force && UCS_PTR_IS_ERR(r) && UCS_PTR_STATUS(r) == UCS_ERR_INVALID_PARAM) {
        /* UCX refuses a forced close outside peer error mode, before it
         * touches the endpoint: close it gracefully instead. */
        memset(&rp, 0, sizeof(rp));
        r = ucp_ep_close_nbx(p->ep, &rp);
    }
    if (UCS_PTR_IS_ERR(r)) {
        return NULL; /* the endpoint is released either way */
    }
    return r;
}

ucs_status_t cu_request_done(void *req)
{
    ucs_status_t st = ucp_request_check_status(req);
    if (st != UCS_INPROGRESS) {
        ucp_request_free(req);
    }
    return st;
}

void cu_peer_free(cu_peer *p)
{
    free(p);
}

cu_op *cu_op_new(uint64_t id)
{
    cu_op *op = calloc(1, sizeof(*op));
    if (op != NULL) {
        op->id = id;
        op->status = UCS_OK;
    }
    return op;
}

/* cu_track accounts one nbx result against op. */
static int cu_track(cu_op *op, ucs_status_ptr_t r)
{
    if (r == NULL) {
        return 1;
    }
    if (UCS_PTR_IS_ERR(r)) {
        cu_op_note(op, UCS_PTR_STATUS(r));
        return 0;
    }
    op->pending++;
    return 1;
}

static void cu_op_param(cu_worker *w, cu_op *op, ucp_request_param_t *rp)
{
    memset(rp, 0, sizeof(*rp));
    rp->op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    rp->cb.send = cu_send_cb;
    rp->user_data = op;
    op->w = w;
}

static void cu_op_settle(cu_worker *w, cu_op *op)
{
    if (--op->pending == 0) { /* drop the guard taken by the caller */
        cu_op_finish(w, op);
    }
}

void cu_post(cu_worker *w, cu_peer *p, cu_op *op, int write, int n,
             uint64_t *laddr, uint64_t *raddr, size_t *len, ucp_rkey_h *rkey,
             ucp_mem_h *memh)
{
    ucp_request_param_t rp;
    int i;

    cu_op_param(w, op, &rp);
    op->pending = 1; /* guard: the op cannot finish while we post */
    for (i = 0; i < n; i++) {
        ucs_status_ptr_t r;
        rp.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        rp.memh = memh[i];
        if (write) {
            r = ucp_put_nbx(p->ep, (void *)(uintptr_t)laddr[i], len[i], raddr[i], rkey[i], &rp);
        } else {
            r = ucp_get_nbx(p->ep, (void *)(uintptr_t)laddr[i], len[i], raddr[i], rkey[i], &rp);
        }
        if (!cu_track(op, r)) {
            break;
        }
    }
    if (write) {
        return; /* the extra reference stays until cu_flush_ops */
    }
    cu_op_settle(w, op);
}

typedef struct {
    cu_worker *w;
    int        n;
    cu_op     *ops[];
} cu_flush_group;

static void cu_flush_settle(cu_flush_group *g, ucs_status_t st)
{
    int i;
    for (i = 0; i < g->n; i++) {
        cu_op_note(g->ops[i], st);
        cu_op_settle(g->w, g->ops[i]);
    }
    free(g);
}

static void cu_flush_cb(void *req, ucs_status_t st, void *user_data)
{
    ucp_request_free(req);
    cu_flush_settle(user_data, st);
}

void cu_flush_ops(cu_worker *w, cu_peer *p, cu_op **ops, int n)
{
    ucp_request_param_t rp;
    ucs_status_ptr_t r;
    cu_flush_group *g;

    g = malloc(sizeof(*g) + (size_t)n * sizeof(cu_op *));
    if (g == NULL) {
        /* Cannot track the flush: fail the ops rather than report DONE
         * early. Their puts complete on their own. */
        int i;
        for (i = 0; i < n; i++) {
            cu_op_note(ops[i], UCS_ERR_NO_MEMORY);
            cu_op_settle(w, ops[i]);
        }
        return;
    }
    g->w = w;
    g->n = n;
    memcpy(g->ops, ops, (size_t)n * sizeof(cu_op *));
    memset(&rp, 0, sizeof(rp));
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    rp.cb.send = cu_flush_cb;
    rp.user_data = g;
    r = ucp_ep_flush_nbx(p->ep, &rp);
    if (r == NULL) {
        cu_flush_settle(g, UCS_OK);
    } else if (UCS_PTR_IS_ERR(r)) {
        cu_flush_settle(g, UCS_PTR_STATUS(r));
    }
}

void cu_send_msg(cu_worker *w, cu_peer *p, cu_op *op, const void *from,
                 size_t from_len, const void *msg, size_t len)
{
    ucp_request_param_t rp;
    char *buf;

    cu_op_param(w, op, &rp);
    op->pending = 1;
    buf = malloc(from_len + len + 1);
    if (buf == NULL) {
        cu_op_note(op, UCS_ERR_NO_MEMORY);
        cu_op_settle(w, op);
        return;
    }
    memcpy(buf, from, from_len);
    memcpy(buf + from_len, msg, len);
    op->buf = buf;
    rp.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = UCP_AM_SEND_FLAG_EAGER;
    cu_track(op, ucp_am_send_nbx(p->ep, CU_AM_ID, buf, from_len, buf + from_len, len, &rp));
    cu_op_settle(w, op);
}

void cu_op_free(cu_op *op)
{
    free(op->buf);
    free(op);
}

cu_msg *cu_take_msg(cu_worker *w)
{
    cu_msg *m = w->msg_head;
    if (m != NULL) {
        w->msg_head = m->next;
        if (w->msg_head == NULL) {
            w->msg_tail = NULL;
        }
    }
    return m;
}

void cu_msg_free(cu_msg *m)
{
    free(m);
}

const char *cu_msg_data(const cu_msg *m)
{
    return m->data;
}
