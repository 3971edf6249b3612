//go:build nixl

// The shim over NIXL's C API (see shim.h).
#define _GNU_SOURCE // dl_iterate_phdr
#include "shim.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cx_agent {
    nixl_capi_agent_t agent;
    nixl_capi_backend_t backend;
    nixl_capi_opt_args_t only;   // backends = {backend}: every call uses this one
    nixl_capi_notif_map_t notifs; // reused by cx_get_notifs
};

static void
put_err(char *err, size_t errlen, const char *call, const char *arg, int st) {
    if (err != NULL && errlen > 0) snprintf(err, errlen, "%s(%s) returned %d", call, arg, st);
}

int
cx_open(const char *name, uint64_t delay_us, const char *backend, int n, const char **keys,
        const char **vals, cx_agent **out, char *err, size_t errlen) {
    // NIXL's progress thread drives the worker between our calls: a peer's
    // transfers into this agent (active messages over tcp and shared
    // memory) and notifications need this side's progress. With a delay of
    // 0 (NIXL's default) the thread polls without waiting: a core per
    // agent, idle or not.
    nixl_capi_agent_config_t cfg = {
        .enable_prog_thread = true,
        .thread_sync = NIXL_CAPI_THREAD_SYNC_DEFAULT,
        .num_workers = 1,
        .pthr_delay_us = delay_us,
    };
    cx_agent *a = calloc(1, sizeof *a);
    if (a == NULL) return NIXL_CAPI_ERROR_BACKEND;
    int st = nixl_capi_create_configured_agent(name, &cfg, &a->agent);
    if (st != NIXL_CAPI_SUCCESS) {
        put_err(err, errlen, "nixl_capi_create_configured_agent", name, st);
        free(a);
        return st;
    }
    nixl_capi_params_t params = NULL;
    st = nixl_capi_create_params(&params);
    for (int i = 0; st == NIXL_CAPI_SUCCESS && i < n; i++)
        st = nixl_capi_params_add(params, keys[i], vals[i]);
    if (st == NIXL_CAPI_SUCCESS) {
        st = nixl_capi_create_backend(a->agent, backend, params, &a->backend);
        if (st != NIXL_CAPI_SUCCESS) put_err(err, errlen, "nixl_capi_create_backend", backend, st);
    } else {
        put_err(err, errlen, "nixl_capi_params_add", backend, st);
    }
    if (params != NULL) nixl_capi_destroy_params(params);
    if (st == NIXL_CAPI_SUCCESS) {
        st = nixl_capi_create_opt_args(&a->only);
        if (st == NIXL_CAPI_SUCCESS) st = nixl_capi_opt_args_add_backend(a->only, a->backend);
        if (st == NIXL_CAPI_SUCCESS) st = nixl_capi_create_notif_map(&a->notifs);
        if (st != NIXL_CAPI_SUCCESS) put_err(err, errlen, "nixl_capi_create_opt_args", backend, st);
    }
    if (st != NIXL_CAPI_SUCCESS) {
        cx_close(a);
        return st;
    }
    *out = a;
    return NIXL_CAPI_SUCCESS;
}

void
cx_close(cx_agent *a) {
    nixl_capi_destroy_agent(a->agent);
    // The handles below are the C API's wrappers only; the agent owned
    // what they named.
    if (a->notifs != NULL) nixl_capi_destroy_notif_map(a->notifs);
    if (a->only != NULL) nixl_capi_destroy_opt_args(a->only);
    if (a->backend != NULL) nixl_capi_destroy_backend(a->backend);
    free(a);
}

int
cx_plugin_params(const char *backend, char **out, size_t *len) {
    // A throwaway agent without a progress thread only asks the plugin
    // manager; it creates no backend.
    nixl_capi_agent_config_t cfg = {.num_workers = 1};
    nixl_capi_agent_t probe;
    int st = nixl_capi_create_configured_agent("custody-param-probe", &cfg, &probe);
    if (st != NIXL_CAPI_SUCCESS) return st;
    nixl_capi_mem_list_t mems = NULL;
    nixl_capi_params_t params = NULL;
    st = nixl_capi_get_plugin_params(probe, backend, &mems, &params);
    size_t cap = 1, used = 0;
    char *s = malloc(cap);
    bool empty = true;
    if (st == NIXL_CAPI_SUCCESS) st = nixl_capi_params_is_empty(params, &empty);
    if (st == NIXL_CAPI_SUCCESS && !empty) {
        nixl_capi_param_iter_t it = NULL;
        st = nixl_capi_params_create_iterator(params, &it);
        for (bool more = st == NIXL_CAPI_SUCCESS; more && s != NULL;) {
            const char *k, *v;
            st = nixl_capi_params_iterator_next(it, &k, &v, &more);
            if (st != NIXL_CAPI_SUCCESS) break;
            size_t need = used + strlen(k) + strlen(v) + 3;
            if (need > cap) {
                cap = 2 * need;
                char *grown = realloc(s, cap);
                if (grown == NULL) free(s);
                s = grown;
                if (s == NULL) break;
            }
            used += (size_t)sprintf(s + used, "%s=%s\n", k, v);
        }
        if (it != NULL) nixl_capi_params_destroy_iterator(it);
    }
    if (mems != NULL) nixl_capi_destroy_mem_list(mems);
    if (params != NULL) nixl_capi_destroy_params(params);
    nixl_capi_destroy_agent(probe);
    if (s == NULL) return NIXL_CAPI_ERROR_BACKEND;
    if (st != NIXL_CAPI_SUCCESS) {
        free(s);
        return st;
    }
    s[used] = '\0';
    *out = s;
    *len = used;
    return NIXL_CAPI_SUCCESS;
}

static int
reg(cx_agent *a, uint64_t addr, uint64_t len, bool add) {
    nixl_capi_reg_dlist_t d;
    int st = nixl_capi_create_reg_dlist(NIXL_CAPI_MEM_DRAM, &d);
    if (st != NIXL_CAPI_SUCCESS) return st;
    st = nixl_capi_reg_dlist_add_desc(d, (uintptr_t)addr, (size_t)len, 0, NULL, 0);
    if (st == NIXL_CAPI_SUCCESS)
        st = add ? nixl_capi_register_mem(a->agent, d, a->only) : nixl_capi_deregister_mem(a->agent, d, a->only);
    nixl_capi_destroy_reg_dlist(d);
    return st;
}

int
cx_register(cx_agent *a, uint64_t addr, uint64_t len) {
    return reg(a, addr, len, true);
}

int
cx_deregister(cx_agent *a, uint64_t addr, uint64_t len) {
    return reg(a, addr, len, false);
}

int
cx_local_md(cx_agent *a, void **out, size_t *len) {
    return nixl_capi_get_local_md(a->agent, out, len);
}

int
cx_load_md(cx_agent *a, const void *md, size_t len, char *name, size_t cap) {
    char *got = NULL;
    int st = nixl_capi_load_remote_md(a->agent, md, len, &got);
    if (cap > 0) name[0] = '\0';
    if (got != NULL) {
        snprintf(name, cap, "%s", got);
        free(got);
    }
    return st;
}

int
cx_invalidate_md(cx_agent *a, const char *name) {
    return nixl_capi_invalidate_remote_md(a->agent, name);
}

int
cx_prep(cx_agent *a, const char *agent, int n, const uint64_t *addrs, const uint64_t *lens,
        void **dlist) {
    nixl_capi_xfer_dlist_t d;
    int st = nixl_capi_create_xfer_dlist(NIXL_CAPI_MEM_DRAM, &d);
    if (st != NIXL_CAPI_SUCCESS) return st;
    for (int i = 0; st == NIXL_CAPI_SUCCESS && i < n; i++)
        st = nixl_capi_xfer_dlist_add_desc(d, (uintptr_t)addrs[i], (size_t)lens[i], 0);
    nixl_capi_xfer_dlist_handle_t h = NULL;
    // NIXL names the local agent "" (NIXL_INIT_AGENT).
    if (st == NIXL_CAPI_SUCCESS)
        st = nixl_capi_prep_xfer_dlist(a->agent, agent == NULL ? "" : agent, d, &h, a->only);
    nixl_capi_destroy_xfer_dlist(d);
    if (st == NIXL_CAPI_SUCCESS) *dlist = h;
    return st;
}

int
cx_release_dlist(cx_agent *a, void *dlist) {
    return nixl_capi_release_xfer_dlist_handle(a->agent, dlist);
}

int
cx_post(cx_agent *a, int op, void *local, const int *lidx, void *remote, const int *ridx, int n,
        const void *notif, size_t notif_len, int has_notif, void **req) {
    nixl_capi_opt_args_t args = a->only;
    int st = NIXL_CAPI_SUCCESS;
    if (has_notif) {
        st = nixl_capi_create_opt_args(&args);
        if (st != NIXL_CAPI_SUCCESS) return st;
        st = nixl_capi_opt_args_add_backend(args, a->backend);
        if (st == NIXL_CAPI_SUCCESS) st = nixl_capi_opt_args_set_notif_msg(args, notif, notif_len);
        if (st == NIXL_CAPI_SUCCESS) st = nixl_capi_opt_args_set_has_notif(args, true);
    }
    nixl_capi_xfer_req_t r = NULL;
    if (st == NIXL_CAPI_SUCCESS)
        st = nixl_capi_make_xfer_req(a->agent, op == 1 ? NIXL_CAPI_XFER_OP_WRITE : NIXL_CAPI_XFER_OP_READ,
                                     local, lidx, (size_t)n, remote, ridx, (size_t)n, &r, args);
    if (st == NIXL_CAPI_SUCCESS) {
        *req = r;
        st = nixl_capi_post_xfer_req(a->agent, r, args);
    }
    if (args != a->only) nixl_capi_destroy_opt_args(args);
    return st;
}

void
cx_status(cx_agent *a, int n, void *const *reqs, int *out) {
    for (int i = 0; i < n; i++) out[i] = nixl_capi_get_xfer_status(a->agent, reqs[i]);
}

int
cx_release_req(cx_agent *a, void *req) {
    int st = nixl_capi_release_xfer_req(a->agent, req);
    if (st == NIXL_CAPI_SUCCESS) nixl_capi_destroy_xfer_req(req);
    return st;
}

int
cx_gen_notif(cx_agent *a, const char *agent, const void *msg, size_t len) {
    return nixl_capi_gen_notif(a->agent, agent, msg, len, a->only);
}

int
cx_get_notifs(cx_agent *a, void **out, size_t *len) {
    *len = 0;
    *out = NULL;
    int st = nixl_capi_get_notifs(a->agent, a->notifs, a->only);
    size_t agents = 0, total = 0;
    if (nixl_capi_notif_map_size(a->notifs, &agents) != NIXL_CAPI_SUCCESS) agents = 0;
    // Two passes over the map: the size, then the records.
    for (int pass = 0; pass < 2 && agents > 0; pass++) {
        char *p = *out;
        for (size_t i = 0; i < agents; i++) {
            const char *name;
            size_t k = 0;
            if (nixl_capi_notif_map_get_agent_at(a->notifs, i, &name) != NIXL_CAPI_SUCCESS ||
                nixl_capi_notif_map_get_notifs_size(a->notifs, name, &k) != NIXL_CAPI_SUCCESS)
                continue;
            uint32_t nl = (uint32_t)strlen(name);
            for (size_t j = 0; j < k; j++) {
                const void *msg;
                size_t ml = 0;
                if (nixl_capi_notif_map_get_notif(a->notifs, name, j, &msg, &ml) != NIXL_CAPI_SUCCESS) continue;
                if (pass == 0) {
                    total += 8 + nl + ml;
                    continue;
                }
                uint32_t ml32 = (uint32_t)ml;
                memcpy(p, &nl, 4);
                memcpy(p + 4, name, nl);
                p += 4 + nl;
                memcpy(p, &ml32, 4);
                memcpy(p + 4, msg, ml);
                p += 4 + ml;
            }
        }
        if (pass == 0) {
            if (total == 0) break;
            *out = malloc(total);
            if (*out == NULL) break;
        } else {
            *len = total;
        }
    }
    nixl_capi_notif_map_clear(a->notifs);
    return st;
}

static int
find_ucp(struct dl_phdr_info *info, size_t size, void *path) {
    (void)size;
    const char *slash = info->dlpi_name != NULL ? strrchr(info->dlpi_name, '/') : NULL;
    if (slash == NULL || strncmp(slash + 1, "libucp", 6) != 0) return 0;
    snprintf(path, 4096, "%s", info->dlpi_name);
    return 1;
}

int
cx_ucx_version(unsigned *major, unsigned *minor, unsigned *release) {
    char path[4096] = "";
    dl_iterate_phdr(find_ucp, path);
    if (path[0] == '\0') return -1;
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (h == NULL) return -1;
    void (*get)(unsigned *, unsigned *, unsigned *);
    *(void **)&get = dlsym(h, "ucp_get_version");
    if (get != NULL) get(major, minor, release);
    dlclose(h);
    return get != NULL ? 0 : -1;
}

void
cx_free(void *p) {
    free(p);
}
