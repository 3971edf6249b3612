/* shim.h: the C layer between Go and UCP.
 *
 * One cu_worker is one UCP context and worker (UCS_THREAD_MODE_SERIALIZED)
 * plus a progress thread of its own (a pthread, not a goroutine). Every
 * UCX call, from the progress thread or from a Go caller's thread, happens
 * under the worker's lock (cu_worker.lock): that is what SERIALIZED asks
 * of us. A caller announces itself in cu_worker.want before it takes the
 * lock, and the progress thread lets it in before its next round, so that
 * a spinning progress thread never starves a post.
 *
 * The hot path is shaped like a pair of rings. Submissions are fixed-size
 * entries (cu_sub) with their variable parts (segments, notification
 * bytes) in side arrays; cu_submit issues a batch of them. Completions are
 * fixed-size entries (cu_done) that cu_take_done hands out in the order
 * the transfers finished; done_seq counts them, so a caller learns whether
 * any are waiting by one atomic load, without a call into C. Today the
 * caller's thread runs cu_submit itself (no hop to another thread); the
 * progress thread could run the same function on entries it takes from a
 * shared-memory ring instead.
 *
 * The shim owns nothing Go allocates: what it keeps is malloc'd here and
 * freed here once UCX has completed the request that used it. */
#ifndef CUSTODY_UCX_SHIM_H
#define CUSTODY_UCX_SHIM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <ucp/api/ucp.h>

struct cu_worker;

/* cu_peer is one endpoint. The error callback only records the failure;
 * the Go side reads it (peer_failures counts them). */
typedef struct cu_peer {
    ucp_ep_h          ep;
    int               failed;
    ucs_status_t      fail_status;
    struct cu_worker *w;
} cu_peer;

/* cu_op tracks one post or one notification send: how many UCX requests
 * are still outstanding and the first error any of them reported. It is
 * freed only once pending is zero, so no request ever outlives it. It
 * never leaves C: the Go side sees its cu_done entry. */
typedef struct cu_op {
    int               pending;  /* outstanding UCX requests, plus guards */
    ucs_status_t      status;   /* first error, UCS_OK if none */
    uint64_t          id;       /* the Go side's key */
    int               write;    /* a WRITE: needs an endpoint flush */
    int               stage;    /* 0: moving bytes; 1: sending the notification */
    int               lost;     /* the notification was not sent: the peer failed */
    int               grouped;  /* scratch for cu_submit's flush grouping */
    char             *notif;    /* from, then message (malloc'd), or NULL */
    size_t            from_len;
    size_t            notif_len;
    cu_peer          *peer;
    struct cu_worker *w;
    struct cu_op     *next;     /* link in the notify or done list */
} cu_op;

/* cu_seg is one contiguous piece of a post, resolved to native addresses
 * and keys. */
typedef struct cu_seg {
    uint64_t   laddr;
    uint64_t   raddr;
    uint64_t   len;
    ucp_rkey_h rkey;
    ucp_mem_h  memh;
} cu_seg;

/* cu_sub is one submission: a transfer of nseg segments (from seg_off in
 * the batch's segments) and, when notif_len > 0, a notification sent once
 * its bytes are in place (notif_len bytes from notif_off in the batch's
 * arena). ok is set by cu_submit: 1 when the transfer was issued (it will
 * complete through a cu_done entry), 0 when memory for it could not be
 * allocated (nothing was issued). */
typedef struct cu_sub {
    uint64_t id;
    cu_peer *peer;
    int32_t  write;
    int32_t  ok;
    uint32_t seg_off;
    uint32_t nseg;
    uint32_t notif_off;
    uint32_t notif_len;
} cu_sub;

/* cu_done is one completion: the op id, its status, the stage it ended in
 * and whether its notification was skipped because the peer failed. */
typedef struct cu_done {
    uint64_t id;
    int32_t  status;
    int32_t  stage;
    int32_t  lost;
    int32_t  pad;
} cu_done;

/* cu_msg is one received notification, copied out of UCX. */
typedef struct cu_msg {
    size_t         from_len;
    size_t         len;
    struct cu_msg *next;
    char           data[];   /* from, then message */
} cu_msg;

typedef struct cu_worker {
    ucp_context_h   ctx;
    ucp_worker_h    worker;
    int             err_peer;     /* endpoints use UCP_ERR_HANDLING_MODE_PEER */

    pthread_mutex_t lock;         /* held around every UCX call */
    int32_t         want;         /* callers waiting for the lock (atomic) */
    int32_t         running;      /* ops, sends and closes UCX still runs (atomic) */
    int32_t         sleeping;     /* the progress thread waits in poll (atomic) */
    int32_t         stop;         /* the progress thread should end (atomic) */
    int             efd;          /* the worker's event fd */
    int             kick_fd;      /* eventfd that wakes the progress thread */
    pthread_t       thread;
    int             started;
    uint64_t        spin_ns;      /* spin this long after the last activity */
    int             sleep_ms;     /* sleep at most this long (a safety net) */
    uint64_t        caller_ns;    /* when a caller last progressed (atomic) */
    uint64_t        rounds;       /* progress rounds of the thread (atomic; tests) */
    uint64_t        sleeps;       /* times the thread went to sleep (atomic; tests) */

    cu_op          *notify_head, *notify_tail; /* bytes done, notification due */
    cu_op          *done_head, *done_tail;     /* terminal ops, oldest first */
    uint64_t        done_seq;     /* ops put on the done list, ever (atomic) */

    cu_msg         *msg_head, *msg_tail;
    uint64_t        msg_seq;      /* notifications received, ever (atomic) */
    uint64_t        msg_lost;     /* notifications dropped: out of memory (atomic) */
    int             fail_msg_allocs; /* tests: fail this many message copies */
    int32_t         paused;       /* tests: the progress thread progresses nothing (atomic) */

    uint64_t        peer_failures;/* bumped by every endpoint error (atomic) */

    /* Telling Go that something changed (sdk.Waker): whatever may change
     * what a call sees (a completion queued, a notification received or
     * lost, an endpoint failed) bumps wake_seq and, when a Go waiter armed
     * wake_want, clears it and writes wake_fd once. The waiter arms, then
     * compares wake_seq with what it saw before it blocks on wake_fd, so
     * that no change is left without a wake-up. */
    int             wake_fd;      /* eventfd, non-blocking; Go reads a dup of it */
    int32_t         wake_want;    /* a Go waiter blocks or is about to (atomic) */
    uint64_t        wake_seq;     /* changes so far (atomic) */
} cu_worker;

/* cu_open creates the context and worker, applying n UCX settings (names
 * without the UCX_ prefix, e.g. "TLS"), and starts the progress thread,
 * which spins spin_ns after the last activity and then sleeps on the
 * worker's event fd (at most sleep_ms at a time). On failure it returns the status, names the failing
 * setting in *bad (-1 for none) and writes nothing to *out. */
ucs_status_t cu_open(int n, char **keys, char **vals, int err_peer, uint64_t spin_ns,
                     int sleep_ms, cu_worker **out, int *bad);
/* cu_close stops the progress thread and frees the worker. */
void cu_close(cu_worker *w);
/* cu_kick wakes the progress thread if it sleeps. */
void cu_kick(cu_worker *w);
unsigned cu_progress(cu_worker *w);
/* cu_caller_progress progresses the worker on the caller's thread until
 * nothing more is ready (at most CU_CALLER_ROUNDS rounds, and none after
 * the one under way once another caller waits for the lock), unless the
 * progress thread holds the lock or more than a few ops are in flight (the
 * progress thread spins for those), and notes the time: while a
 * caller keeps progressing (it polls transfers it waits for), the progress
 * thread naps instead of spinning beside it. A call that progressed
 * nothing gives up the CPU (sched_yield): the transfer waits for the peer
 * or the thread, and a caller looping on it would take their core. With
 * more than a few ops in flight it progresses nothing and, with yield
 * set, gives up the CPU too (a caller polling for its transfers lets the
 * spinning thread run); a caller with other work, the ring pump of a
 * transport process (it asks for Events and serves submissions in a
 * loop), passes 0: a scheduler slice lost on each of its calls would cap
 * the completions it forwards. */
unsigned cu_caller_progress(cu_worker *w, int yield);

ucs_status_t cu_address(cu_worker *w, void **addr, size_t *len);
void cu_address_release(cu_worker *w, void *addr);

ucs_status_t cu_mem_map(cu_worker *w, uint64_t addr, size_t len, ucp_mem_h *memh,
                        void **rkey, size_t *rkey_len);
void cu_rkey_buffer_release(void *rkey);
ucs_status_t cu_mem_unmap(cu_worker *w, ucp_mem_h memh);

ucs_status_t cu_peer_create(cu_worker *w, const void *addr, cu_peer **out);
ucs_status_t cu_rkey_unpack(cu_peer *p, const void *buf, ucp_rkey_h *out);
void cu_rkey_destroy(cu_worker *w, ucp_rkey_h rkey);
/* cu_peer_close starts closing the endpoint (force or flush) and returns
 * the request to wait on, or NULL when it finished at once. */
void *cu_peer_close(cu_peer *p, int force);
/* cu_request_done reports UCS_INPROGRESS while req (an endpoint close)
 * runs; after any other result the request has been freed. */
ucs_status_t cu_request_done(cu_worker *w, void *req);
void cu_peer_free(cu_peer *p);

/* cu_submit issues n submissions, each as one op: a put or get per
 * segment, and after the WRITEs of the batch one endpoint flush per peer
 * (covering every put before it: a completed put only frees the source,
 * the flush means the bytes are at the destination). An op completes
 * through a cu_done entry once every request it depends on completed, and
 * its notification, when it has one, was sent after that. from is the
 * agent name notifications carry. */
void cu_submit(cu_worker *w, cu_sub *subs, int n, const cu_seg *segs,
               const char *arena, const char *from, size_t from_len);
/* cu_send_msg sends one notification (header from, payload msg) as an
 * eager active message, copying both first. It completes through a
 * cu_done entry with id. It returns 0 when memory for it could not be
 * allocated (nothing was sent). */
int cu_send_msg(cu_worker *w, cu_peer *p, uint64_t id, const char *from,
                size_t from_len, const void *msg, size_t len);
/* cu_wake_fd returns a duplicate of the worker's wake eventfd (the
 * caller owns and closes it), or -errno. */
int cu_wake_fd(cu_worker *w);
/* cu_wake_arm announces a waiter and returns wake_seq, read after the
 * announcement: a change after that read writes wake_fd. */
uint64_t cu_wake_arm(cu_worker *w);
/* cu_take_done moves up to cap completions, oldest first, to out and
 * returns how many. */
int cu_take_done(cu_worker *w, cu_done *out, int cap);

cu_msg *cu_take_msg(cu_worker *w);
void cu_msg_free(cu_msg *m);
const char *cu_msg_data(const cu_msg *m); /* from, then message */
/* cu_fail_msg_allocs makes the next n copies of received notifications
 * fail as if malloc had (tests). */
void cu_fail_msg_allocs(cu_worker *w, int n);
/* cu_pause_thread stops (1) or resumes (0) the progress thread's rounds
 * (tests: what callers progress themselves). */
void cu_pause_thread(cu_worker *w, int on);


#define CU_AM_ID 7

#endif
