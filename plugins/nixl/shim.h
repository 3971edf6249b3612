//go:build nixl

// The face of NIXL the Go side calls: one opaque agent with one backend,
// over NIXL's C API (libnixl_capi, declared in wrapper.h, the header NIXL
// ships with its Rust bindings). Calls return nixl_capi_status_t values.
// The Go side serialises every call; NIXL's own progress thread runs
// beside them.
#ifndef CUSTODY_NIXL_SHIM_H
#define CUSTODY_NIXL_SHIM_H

#include <stddef.h>
#include <stdint.h>

#include "wrapper.h"

typedef struct cx_agent cx_agent;

// cx_open creates an agent named name with NIXL's progress thread (which
// waits up to delay_us for the worker's events between rounds) and one
// backend of type backend, created with the n params keys[i]=vals[i]. On
// failure it returns the status and writes which call failed into err.
int cx_open(const char *name, uint64_t delay_us, const char *backend, int n, const char **keys,
            const char **vals, cx_agent **out, char *err, size_t errlen);
void cx_close(cx_agent *a);

// cx_plugin_params lists the parameters a backend plugin advertises, as
// "key=default\n" lines in a malloc'd buffer (free with cx_free).
int cx_plugin_params(const char *backend, char **out, size_t *len);

// cx_register and cx_deregister register DRAM [addr, addr+len).
int cx_register(cx_agent *a, uint64_t addr, uint64_t len);
int cx_deregister(cx_agent *a, uint64_t addr, uint64_t len);

// cx_local_md returns getLocalMD's blob, malloc'd (free with cx_free).
int cx_local_md(cx_agent *a, void **out, size_t *len);
// cx_load_md loads a peer's blob and writes the agent name NIXL read from
// it into name (NUL-terminated, truncated to cap).
int cx_load_md(cx_agent *a, const void *md, size_t len, char *name, size_t cap);
int cx_invalidate_md(cx_agent *a, const char *name);
// cx_prep prepares a dlist of n DRAM descriptors: local when agent is
// NULL, else of that remote agent.
int cx_prep(cx_agent *a, const char *agent, int n, const uint64_t *addrs, const uint64_t *lens,
            void **dlist);
int cx_release_dlist(cx_agent *a, void *dlist);

// cx_post makes and posts one transfer (op 0 READ, 1 WRITE) of n index
// pairs; with has_notif the notification rides with it. It returns the
// post's status (IN_PROG, SUCCESS or an error); *req is set when a
// request exists (also after a failed post: release it).
int cx_post(cx_agent *a, int op, void *local, const int *lidx, void *remote, const int *ridx,
            int n, const void *notif, size_t notif_len, int has_notif, void **req);
// cx_status writes getXferStatus of each of n requests into out.
void cx_status(cx_agent *a, int n, void *const *reqs, int *out);
// cx_release_req releases a request; on success it is freed.
int cx_release_req(cx_agent *a, void *req);

int cx_gen_notif(cx_agent *a, const char *agent, const void *msg, size_t len);
// cx_get_notifs drains getNotifs into a malloc'd buffer of records
// [u32 name length][name][u32 message length][message] (free with
// cx_free); *len is 0 when none arrived.
int cx_get_notifs(cx_agent *a, void **out, size_t *len);

// cx_ucx_version writes the version of the UCX loaded in this process (by
// NIXL's UCX backend plugin); it returns -1 when none is loaded.
int cx_ucx_version(unsigned *major, unsigned *minor, unsigned *release);

void cx_free(void *p);

#endif
