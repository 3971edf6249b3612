/* shim.c: see shim.h. */
#include "shim.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* CU_IDLE_ROUNDS idle progress rounds in a row make a spinning progress
 * thread yield the core: both sides' progress moves the bytes, and a peer
 * waiting for its turn on our core would otherwise wait for our time slice
 * to end. */
#define CU_IDLE_ROUNDS 64
/* A caller that polls in a loop progresses the worker every few hundred
 * nanoseconds. While one does (it progressed within CU_CALLER_RECENT_NS)
 * and at most CU_NAP_MAX_RUNNING ops are in flight, the progress thread
 * naps CU_CALLER_NAP_NS at a time instead of spinning beside it: the
 * caller's own progress finishes a transfer or two soonest, and on a
 * crowded machine a second spinner only takes the caller's core. With
 * more in flight the thread keeps the pipeline full beside the caller; a
 * caller that polls now and then (a host's rounds, tens of µs apart)
 * leaves the progress to the thread. */
#define CU_CALLER_RECENT_NS 2000
#define CU_CALLER_NAP_NS 20000
#define CU_NAP_MAX_RUNNING 4
/* CU_CALLER_ROUNDS bounds the progress rounds of one caller's call. */
#define CU_CALLER_ROUNDS 64

#define LOAD(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_SEQ_CST)

static inline void cu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static uint64_t cu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* cu_lock takes the worker's lock for a caller: it announces itself first,
 * so that the progress thread lets it in before its next round. */
static void cu_lock(cu_worker *w)
{
    ADD(&w->want, 1);
    pthread_mutex_lock(&w->lock);
    ADD(&w->want, -1);
}

static void cu_unlock(cu_worker *w)
{
    pthread_mutex_unlock(&w->lock);
}

/* cu_thread_lock takes the lock for the progress thread, after every
 * caller that waits for it. */
static void cu_thread_lock(cu_worker *w)
{
    unsigned i = 0;
    while (LOAD(&w->want) > 0) {
        if (++i % 64 == 0) {
            sched_yield();
        } else {
            cu_relax();
        }
    }
    pthread_mutex_lock(&w->lock);
}

/* cu_wake notes a change Go should hear about (see cu_worker.wake_fd):
 * one atomic add, and one eventfd write only when a waiter is armed. */
static void cu_wake(cu_worker *w)
{
    uint64_t one = 1;
    ADD(&w->wake_seq, 1);
    if (LOAD(&w->wake_want) && __atomic_exchange_n(&w->wake_want, 0, __ATOMIC_SEQ_CST)) {
        (void)!write(w->wake_fd, &one, sizeof(one));
    }
}

/* ---- ops ---- */

static void cu_op_note(cu_op *op, ucs_status_t st)
{
    if (st != UCS_OK && op->status == UCS_OK) {
        op->status = st;
    }
}

static void cu_op_free(cu_op *op)
{
    free(op->notif);
    free(op);
}

static void cu_push(cu_op **head, cu_op **tail, cu_op *op)
{
    op->next = NULL;
    if (*tail) {
        (*tail)->next = op;
    } else {
        *head = op;
    }
    *tail = op;
}

/* cu_op_finish runs when an op's last request completed (under the lock):
 * a post whose bytes arrived and that carries a notification waits for
 * cu_drain_notify to send it; anything else is terminal. */
static void cu_op_finish(cu_worker *w, cu_op *op)
{
    if (op->stage == 0 && op->notif != NULL && op->status == UCS_OK) {
        cu_push(&w->notify_head, &w->notify_tail, op);
        return;
    }
    cu_push(&w->done_head, &w->done_tail, op);
    ADD(&w->done_seq, 1);
    ADD(&w->running, -1);
    cu_wake(w);
}

static void cu_op_settle(cu_worker *w, cu_op *op)
{
    if (--op->pending == 0) {
        cu_op_finish(w, op);
    }
}

/* Every request's completion lands here: record its status, free the
 * request (it has completed, so nothing of it still runs) and finish the
 * op when it was the last one. */
static void cu_send_cb(void *req, ucs_status_t st, void *user_data)
{
    cu_op *op = user_data;
    cu_op_note(op, st);
    ucp_request_free(req);
    cu_op_settle(op->w, op);
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

/* cu_am_send sends op's notification; the op settles when it completed. */
static void cu_am_send(cu_worker *w, cu_op *op)
{
    ucp_request_param_t rp;
    memset(&rp, 0, sizeof(rp));
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                      UCP_OP_ATTR_FIELD_FLAGS;
    rp.cb.send = cu_send_cb;
    rp.user_data = op;
    rp.flags = UCP_AM_SEND_FLAG_EAGER;
    op->stage = 1;
    op->pending = 1; /* guard */
    cu_track(op, ucp_am_send_nbx(op->peer->ep, CU_AM_ID, op->notif, op->from_len,
                                 op->notif + op->from_len, op->notif_len, &rp));
    cu_op_settle(w, op);
}

/* cu_drain_notify sends the notifications of posts whose bytes arrived
 * (under the lock, outside any UCX callback). One whose peer failed is not
 * sent: the op ends with the peer's failure. */
static void cu_drain_notify(cu_worker *w)
{
    cu_op *op;
    while ((op = w->notify_head) != NULL) {
        w->notify_head = op->next;
        if (w->notify_head == NULL) {
            w->notify_tail = NULL;
        }
        if (op->peer->failed) {
            op->stage = 1;
            op->lost = 1;
            cu_op_note(op, op->peer->fail_status != UCS_OK ? op->peer->fail_status
                                                           : UCS_ERR_CONNECTION_RESET);
            cu_op_finish(w, op);
            continue;
        }
        cu_am_send(w, op);
    }
}

/* ---- receiving ---- */

static ucs_status_t cu_am_cb(void *arg, const void *header, size_t header_length,
                             void *data, size_t length,
                             const ucp_am_recv_param_t *param)
{
    cu_worker *w = arg;
    cu_msg *m = NULL;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        /* Senders force eager; a rendezvous message is not ours. */
        return UCS_ERR_UNSUPPORTED;
    }
    if (w->fail_msg_allocs > 0) {
        w->fail_msg_allocs--;
    } else {
        m = malloc(sizeof(*m) + header_length + length);
    }
    if (m == NULL) {
        /* The message cannot be kept, and UCX cannot tell the sender: it
         * takes any status but UCS_OK here (UCS_INPROGRESS aside) for a
         * broken callback and aborts the process (ucp_am.c asserts). Count
         * the loss, so that Notifications reports it instead of hiding it. */
        ADD(&w->msg_lost, 1);
        cu_wake(w);
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
    ADD(&w->msg_seq, 1);
    cu_wake(w);
    return UCS_OK;
}

/* ---- the progress thread ---- */

/* cu_round progresses the worker once and sends due notifications. */
static unsigned cu_round(cu_worker *w)
{
    unsigned n = ucp_worker_progress(w->worker);
    if (w->notify_head != NULL) {
        cu_drain_notify(w);
    }
    return n;
}

/* cu_sleep arms the worker's event fd and waits on it and on the kick fd,
 * unless something is in flight or an event is already pending. */
static void cu_sleep(cu_worker *w)
{
    struct pollfd fds[2];
    ucs_status_t st;
    uint64_t v;

    cu_thread_lock(w);
    st = ucp_worker_arm(w->worker);
    cu_unlock(w);
    if (st == UCS_ERR_BUSY) {
        return; /* events wait: progress them */
    }
    STORE(&w->sleeping, 1);
    /* A caller that submitted before it saw sleeping set kicks nobody:
     * look at running after publishing sleeping (both sequentially
     * consistent), so one of the two sides sees the other. */
    if (LOAD(&w->running) > 0 || LOAD(&w->stop) || LOAD(&w->want) > 0) {
        STORE(&w->sleeping, 0);
        return;
    }
    ADD(&w->sleeps, 1);
    fds[0].fd = w->efd;
    fds[0].events = POLLIN;
    fds[0].revents = 0;
    fds[1].fd = w->kick_fd;
    fds[1].events = POLLIN;
    fds[1].revents = 0;
    if (st != UCS_OK) {
        fds[0].fd = -1; /* cannot arm: wake on kicks and the period only */
    }
    (void)poll(fds, 2, w->sleep_ms);
    STORE(&w->sleeping, 0);
    if (fds[1].revents & POLLIN) {
        (void)!read(w->kick_fd, &v, sizeof(v));
    }
}

/* cu_thread spins while anything is in flight and for spin_ns after the
 * last event, then sleeps on the worker's event fd: an idle worker costs
 * no CPU, and incoming RMA (which needs this side's progress) wakes it. */
static void *cu_thread(void *arg)
{
    cu_worker *w = arg;
    uint64_t active = cu_now_ns();
    unsigned idle = 0, i = 0;

    while (!LOAD(&w->stop)) {
        unsigned n;
        int32_t running;
        if (LOAD(&w->paused)) {
            struct timespec ts = {0, CU_CALLER_NAP_NS};
            nanosleep(&ts, NULL);
            continue;
        }
        cu_thread_lock(w);
        n = cu_round(w);
        cu_unlock(w);
        ADD(&w->rounds, 1);
        if (n > 0) {
            idle = 0;
            i = 0;
            active = 0; /* read the clock at the next idle round */
            continue;
        }
        if (++idle >= CU_IDLE_ROUNDS) {
            sched_yield();
            idle = 0;
        }
        running = LOAD(&w->running);
        if (running > 0) {
            uint64_t c = LOAD(&w->caller_ns);
            active = 0;
            if (running <= CU_NAP_MAX_RUNNING && c != 0 &&
                cu_now_ns() - c < CU_CALLER_RECENT_NS) {
                /* A caller polls and progresses: leave it the core. */
                struct timespec ts = {0, CU_CALLER_NAP_NS};
                nanosleep(&ts, NULL);
            }
            continue;
        }
        if (i++ % 16 != 0) { /* the clock costs about one idle progress */
            continue;
        }
        {
            uint64_t now = cu_now_ns();
            if (active == 0) {
                active = now;
            } else if (now - active >= w->spin_ns) {
                cu_sleep(w);
                i = 1; /* back to sleep soon if the wake-up brought nothing */
            }
        }
    }
    return NULL;
}

/* ---- lifecycle ---- */

ucs_status_t cu_open(int n, char **keys, char **vals, int err_peer, uint64_t spin_ns,
                     int sleep_ms, cu_worker **out, int *bad)
{
    int i;
    ucp_config_t *cfg;
    ucp_params_t params;
    ucp_worker_params_t wp;
    ucp_am_handler_param_t ap;
    cu_worker *w;
    ucs_status_t st;

    *bad = -1;
    w = calloc(1, sizeof(*w));
    if (w == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    w->err_peer = err_peer;
    w->spin_ns = spin_ns;
    w->sleep_ms = sleep_ms;
    w->efd = -1;
    w->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->kick_fd < 0) {
        free(w);
        return UCS_ERR_IO_ERROR;
    }
    w->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->wake_fd < 0) {
        close(w->kick_fd);
        free(w);
        return UCS_ERR_IO_ERROR;
    }
    pthread_mutex_init(&w->lock, NULL);
    st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK) {
        goto err_fd;
    }
    for (i = 0; i < n; i++) {
        st = ucp_config_modify(cfg, keys[i], vals[i]);
        if (st != UCS_OK) {
            *bad = i;
            ucp_config_release(cfg);
            goto err_fd;
        }
    }
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    params.mt_workers_shared = 0; /* one worker per context */
    st = ucp_init(&params, cfg, &w->ctx);
    ucp_config_release(cfg);
    if (st != UCS_OK) {
        goto err_fd;
    }
    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED; /* our lock serialises */
    st = ucp_worker_create(w->ctx, &wp, &w->worker);
    if (st != UCS_OK) {
        goto err_ctx;
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
        goto err_worker;
    }
    st = ucp_worker_get_efd(w->worker, &w->efd);
    if (st != UCS_OK) {
        goto err_worker;
    }
    if (pthread_create(&w->thread, NULL, cu_thread, w) != 0) {
        st = UCS_ERR_NO_RESOURCE;
        goto err_worker;
    }
    w->started = 1;
    *out = w;
    return UCS_OK;

err_worker:
    ucp_worker_destroy(w->worker);
err_ctx:
    ucp_cleanup(w->ctx);
err_fd:
    close(w->kick_fd);
    close(w->wake_fd);
    pthread_mutex_destroy(&w->lock);
    free(w);
    return st;
}

void cu_kick(cu_worker *w)
{
    uint64_t one = 1;
    if (LOAD(&w->sleeping)) {
        (void)!write(w->kick_fd, &one, sizeof(one));
    }
}

void cu_close(cu_worker *w)
{
    cu_msg *m;
    cu_op *op;
    uint64_t one = 1;
    if (w->started) {
        STORE(&w->stop, 1);
        (void)!write(w->kick_fd, &one, sizeof(one));
        pthread_join(w->thread, NULL);
    }
    while ((m = cu_take_msg(w)) != NULL) {
        free(m);
    }
    while ((op = w->done_head) != NULL) {
        w->done_head = op->next;
        cu_op_free(op);
    }
    while ((op = w->notify_head) != NULL) {
        w->notify_head = op->next;
        cu_op_free(op);
    }
    ucp_worker_destroy(w->worker);
    ucp_cleanup(w->ctx);
    close(w->kick_fd);
    close(w->wake_fd);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

int cu_wake_fd(cu_worker *w)
{
    int fd = fcntl(w->wake_fd, F_DUPFD_CLOEXEC, 0);
    return fd < 0 ? -errno : fd;
}

uint64_t cu_wake_arm(cu_worker *w)
{
    STORE(&w->wake_want, 1);
    return LOAD(&w->wake_seq);
}

unsigned cu_progress(cu_worker *w)
{
    unsigned n;
    cu_lock(w);
    n = cu_round(w);
    cu_unlock(w);
    return n;
}

unsigned cu_caller_progress(cu_worker *w, int yield)
{
    unsigned n = 0, got, i;
    if (LOAD(&w->running) > CU_NAP_MAX_RUNNING) {
        /* The progress thread spins for these: progressing here too would
         * only contend for the lock (and stall the thread whenever this
         * caller is preempted holding it). Leave it the core. */
        if (yield) {
            sched_yield();
        }
        return 0;
    }
    if (pthread_mutex_trylock(&w->lock) != 0) {
        return 0; /* the progress thread is at it */
    }
    /* Drain what is ready (bounded), not one round: a caller that polls
     * in a loop then moves as much per call as the progress thread. Stop
     * as soon as another caller waits for the lock (a Post: callers
     * progress outside the agent's lock, and a Post must not wait for
     * their progress), as the progress thread lets it in after a round. */
    for (i = 0; i < CU_CALLER_ROUNDS; i++) {
        got = cu_round(w);
        n += got;
        if (got == 0 || LOAD(&w->want) > 0) {
            break;
        }
    }
    cu_unlock(w);
    STORE(&w->caller_ns, cu_now_ns());
    if (n == 0) {
        /* Nothing was ready: the transfer waits for the peer or for this
         * side's progress thread. A caller that polls in a loop would
         * otherwise take a core from them; let them run first (at once
         * when a core is free). */
        sched_yield();
    }
    return n;
}

ucs_status_t cu_address(cu_worker *w, void **addr, size_t *len)
{
    ucs_status_t st;
    cu_lock(w);
    st = ucp_worker_get_address(w->worker, (ucp_address_t **)addr, len);
    cu_unlock(w);
    return st;
}

void cu_address_release(cu_worker *w, void *addr)
{
    cu_lock(w);
    ucp_worker_release_address(w->worker, addr);
    cu_unlock(w);
}

/* ---- memory ---- */

ucs_status_t cu_mem_map(cu_worker *w, uint64_t addr, size_t len, ucp_mem_h *memh,
                        void **rkey, size_t *rkey_len)
{
    ucp_mem_map_params_t mp;
    ucs_status_t st;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = (void *)(uintptr_t)addr;
    mp.length = len;
    cu_lock(w);
    st = ucp_mem_map(w->ctx, &mp, memh);
    if (st == UCS_OK) {
        st = ucp_rkey_pack(w->ctx, *memh, rkey, rkey_len);
        if (st != UCS_OK) {
            ucp_mem_unmap(w->ctx, *memh);
        }
    }
    cu_unlock(w);
    return st;
}

void cu_rkey_buffer_release(void *rkey)
{
    ucp_rkey_buffer_release(rkey);
}

ucs_status_t cu_mem_unmap(cu_worker *w, ucp_mem_h memh)
{
    ucs_status_t st;
    cu_lock(w);
    st = ucp_mem_unmap(w->ctx, memh);
    cu_unlock(w);
    return st;
}

/* ---- peers ---- */

static void cu_ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t st)
{
    cu_peer *p = arg;
    (void)ep;
    if (!p->failed) {
        p->failed = 1;
        p->fail_status = st;
        ADD(&p->w->peer_failures, 1);
        cu_wake(p->w);
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
    cu_lock(w);
    st = ucp_ep_create(w->worker, &ep, &p->ep);
    cu_unlock(w);
    if (st != UCS_OK) {
        free(p);
        return st;
    }
    *out = p;
    return UCS_OK;
}

ucs_status_t cu_rkey_unpack(cu_peer *p, const void *buf, ucp_rkey_h *out)
{
    ucs_status_t st;
    cu_lock(p->w);
    st = ucp_ep_rkey_unpack(p->ep, buf, out);
    cu_unlock(p->w);
    return st;
}

void cu_rkey_destroy(cu_worker *w, ucp_rkey_h rkey)
{
    cu_lock(w);
    ucp_rkey_destroy(rkey);
    cu_unlock(w);
}

void *cu_peer_close(cu_peer *p, int force)
{
    cu_worker *w = p->w;
    ucp_request_param_t rp;
    ucs_status_ptr_t r;
    memset(&rp, 0, sizeof(rp));
    if (force) {
        rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    }
    cu_lock(w);
    r = ucp_ep_close_nbx(p->ep, &rp);
    if (force && UCS_PTR_IS_ERR(r) && UCS_PTR_STATUS(r) == UCS_ERR_INVALID_PARAM) {
        /* UCX refuses a forced close outside peer error mode, before it
         * touches the endpoint: close it gracefully instead. */
        memset(&rp, 0, sizeof(rp));
        r = ucp_ep_close_nbx(p->ep, &rp);
    }
    if (UCS_PTR_IS_PTR(r)) {
        ADD(&w->running, 1); /* the progress thread spins until it ends */
    }
    cu_unlock(w);
    cu_kick(w);
    if (UCS_PTR_IS_ERR(r)) {
        return NULL; /* the endpoint is released either way */
    }
    return r;
}

ucs_status_t cu_request_done(cu_worker *w, void *req)
{
    ucs_status_t st;
    cu_lock(w);
    st = ucp_request_check_status(req);
    if (st != UCS_INPROGRESS) {
        ucp_request_free(req);
        ADD(&w->running, -1);
    }
    cu_unlock(w);
    return st;
}

void cu_peer_free(cu_peer *p)
{
    free(p);
}

/* ---- submitting ---- */

static void cu_op_param(cu_op *op, ucp_request_param_t *rp)
{
    memset(rp, 0, sizeof(*rp));
    rp->op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_MEMH | UCP_OP_ATTR_FLAG_MULTI_SEND;
    rp->cb.send = cu_send_cb;
    rp->user_data = op;
}

/* cu_post issues op's segments. A read op settles at once when its
 * requests did; a write op keeps its guard until its flush completed. */
static void cu_post(cu_worker *w, cu_op *op, const cu_seg *segs, uint32_t n)
{
    ucp_request_param_t rp;
    uint32_t i;

    cu_op_param(op, &rp);
    op->pending = 1; /* guard: the op cannot finish while we post */
    for (i = 0; i < n; i++) {
        ucs_status_ptr_t r;
        rp.memh = segs[i].memh;
        if (op->write) {
            r = ucp_put_nbx(op->peer->ep, (void *)(uintptr_t)segs[i].laddr, segs[i].len,
                            segs[i].raddr, segs[i].rkey, &rp);
        } else {
            r = ucp_get_nbx(op->peer->ep, (void *)(uintptr_t)segs[i].laddr, segs[i].len,
                            segs[i].raddr, segs[i].rkey, &rp);
        }
        if (!cu_track(op, r)) {
            break;
        }
    }
    if (!op->write) {
        cu_op_settle(w, op);
    }
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

/* cu_flush issues one endpoint flush on p covering the n write ops posted
 * on it before, and drops each op's guard when it completes. */
static void cu_flush(cu_worker *w, cu_peer *p, cu_op **ops, int n)
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

void cu_submit(cu_worker *w, cu_sub *subs, int n, const cu_seg *segs,
               const char *arena, const char *from, size_t from_len)
{
    cu_op *stack[2 * 16], **ops = stack, **grp;
    int i, j, k;

    if (n > 16) {
        ops = calloc(2 * (size_t)n, sizeof(*ops));
        if (ops == NULL) {
            for (i = 0; i < n; i++) {
                subs[i].ok = 0;
            }
            return;
        }
    }
    grp = ops + n;
    /* Allocate outside the lock. */
    for (i = 0; i < n; i++) {
        cu_sub *s = &subs[i];
        cu_op *op = calloc(1, sizeof(*op));
        s->ok = 0;
        ops[i] = NULL;
        if (op == NULL) {
            continue;
        }
        if (s->notif_len > 0) {
            op->notif = malloc(from_len + s->notif_len);
            if (op->notif == NULL) {
                free(op);
                continue;
            }
            memcpy(op->notif, from, from_len);
            memcpy(op->notif + from_len, arena + s->notif_off, s->notif_len);
            op->from_len = from_len;
            op->notif_len = s->notif_len;
        }
        op->id = s->id;
        op->write = s->write != 0;
        op->peer = s->peer;
        op->w = w;
        op->status = UCS_OK;
        ops[i] = op;
        s->ok = 1;
    }
    cu_lock(w);
    for (i = 0; i < n; i++) {
        if (ops[i] != NULL) {
            ADD(&w->running, 1);
            cu_post(w, ops[i], segs + subs[i].seg_off, subs[i].nseg);
        }
    }
    /* One flush per peer after the batch's WRITEs. No op is freed while we
     * hold the lock (only cu_take_done frees), so ops[] stays valid even
     * for ops that already finished. */
    for (i = 0; i < n; i++) {
        cu_op *op = ops[i];
        if (op == NULL || !op->write || op->grouped) {
            continue;
        }
        k = 0;
        for (j = i; j < n; j++) {
            cu_op *o = ops[j];
            if (o != NULL && o->write && !o->grouped && o->peer == op->peer) {
                o->grouped = 1;
                grp[k++] = o;
            }
        }
        cu_flush(w, op->peer, grp, k);
    }
    if (w->notify_head != NULL) {
        cu_drain_notify(w);
    }
    cu_unlock(w);
    if (ops != stack) {
        free(ops);
    }
    cu_kick(w);
}

int cu_send_msg(cu_worker *w, cu_peer *p, uint64_t id, const char *from,
                size_t from_len, const void *msg, size_t len)
{
    cu_op *op = calloc(1, sizeof(*op));
    if (op == NULL) {
        return 0;
    }
    op->notif = malloc(from_len + len + 1);
    if (op->notif == NULL) {
        free(op);
        return 0;
    }
    memcpy(op->notif, from, from_len);
    if (len > 0) {
        memcpy(op->notif + from_len, msg, len);
    }
    op->from_len = from_len;
    op->notif_len = len;
    op->id = id;
    op->peer = p;
    op->w = w;
    op->status = UCS_OK;
    cu_lock(w);
    ADD(&w->running, 1);
    cu_am_send(w, op);
    cu_unlock(w);
    cu_kick(w);
    return 1;
}

int cu_take_done(cu_worker *w, cu_done *out, int cap)
{
    int n = 0;
    cu_op *op, *freeme = NULL;
    cu_lock(w);
    while (n < cap && (op = w->done_head) != NULL) {
        w->done_head = op->next;
        if (w->done_head == NULL) {
            w->done_tail = NULL;
        }
        out[n].id = op->id;
        out[n].status = op->status;
        out[n].stage = op->stage;
        out[n].lost = op->lost;
        out[n].pad = 0;
        n++;
        op->next = freeme;
        freeme = op;
    }
    cu_unlock(w);
    while ((op = freeme) != NULL) {
        freeme = op->next;
        cu_op_free(op);
    }
    return n;
}

/* ---- notifications received ---- */

cu_msg *cu_take_msg(cu_worker *w)
{
    cu_msg *m;
    cu_lock(w);
    m = w->msg_head;
    if (m != NULL) {
        w->msg_head = m->next;
        if (w->msg_head == NULL) {
            w->msg_tail = NULL;
        }
    }
    cu_unlock(w);
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

void cu_fail_msg_allocs(cu_worker *w, int n)
{
    cu_lock(w);
    w->fail_msg_allocs = n;
    cu_unlock(w);
}

void cu_pause_thread(cu_worker *w, int on)
{
    STORE(&w->paused, on);
}
