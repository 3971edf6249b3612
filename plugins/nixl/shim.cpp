//go:build nixl

// The extern "C" shim over NIXL's C++ agent API (see shim.h).
#include "shim.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <nixl.h>

static_assert(CX_IN_PROG == NIXL_IN_PROG && CX_SUCCESS == NIXL_SUCCESS &&
                  CX_ERR_INVALID_PARAM == NIXL_ERR_INVALID_PARAM &&
                  CX_ERR_NOT_FOUND == NIXL_ERR_NOT_FOUND && CX_ERR_MISMATCH == NIXL_ERR_MISMATCH &&
                  CX_ERR_NOT_ALLOWED == NIXL_ERR_NOT_ALLOWED &&
                  CX_ERR_REMOTE_DISCONNECT == NIXL_ERR_REMOTE_DISCONNECT,
              "shim.h's status values differ from nixl_status_t");

struct cx_agent {
    nixlAgent *agent;
    nixlBackendH *backend;
    nixl_opt_args_t only; // backends = {backend}: every call uses this one
};

namespace {

void
put_err(char *err, size_t errlen, const std::string &msg) {
    if (err == nullptr || errlen == 0) return;
    std::strncpy(err, msg.c_str(), errlen - 1);
    err[errlen - 1] = '\0';
}

int
dram_reg(uint64_t addr, uint64_t len, nixl_reg_dlist_t &out) {
    out.addDesc(nixlBlobDesc(static_cast<uintptr_t>(addr), static_cast<size_t>(len), 0, ""));
    return NIXL_SUCCESS;
}

} // namespace

extern "C" {

int
cx_open(const char *name, uint64_t delay_us, const char *backend, int n, const char **keys,
        const char **vals, cx_agent **out, char *err, size_t errlen) {
    cx_agent *a = nullptr;
    try {
        // NIXL's progress thread drives the worker between our calls: a
        // peer's transfers into this agent (active messages over tcp and
        // shared memory) and notifications need this side's progress.
        // With a delay of 0 (NIXL's default) the thread polls without
        // waiting: a core per agent, idle or not.
        nixlAgentConfig cfg(true);
        cfg.pthrDelay = delay_us;
        a = new cx_agent{new nixlAgent(name, cfg), nullptr, {}};
        nixl_b_params_t params;
        for (int i = 0; i < n; i++) params[keys[i]] = vals[i];
        nixl_status_t st = a->agent->createBackend(backend, params, a->backend);
        if (st != NIXL_SUCCESS || a->backend == nullptr) {
            put_err(err, errlen, std::string("createBackend(") + backend + ") returned " +
                    nixlEnumStrings::statusStr(st));
            delete a->agent;
            delete a;
            return st != NIXL_SUCCESS ? st : NIXL_ERR_BACKEND;
        }
        a->only.backends.push_back(a->backend);
        *out = a;
        return NIXL_SUCCESS;
    } catch (const std::exception &e) {
        put_err(err, errlen, e.what());
    } catch (...) {
        put_err(err, errlen, "unknown C++ exception");
    }
    if (a != nullptr) {
        delete a->agent;
        delete a;
    }
    return CX_EXCEPTION;
}

void
cx_close(cx_agent *a) {
    try {
        delete a->agent;
    } catch (...) {
    }
    delete a;
}

int
cx_plugin_params(const char *backend, char **out, size_t *len, char *err, size_t errlen) {
    try {
        // A throwaway agent without a progress thread only asks the
        // plugin manager; it creates no backend.
        nixlAgent probe("custody-param-probe", nixlAgentConfig(false));
        nixl_mem_list_t mems;
        nixl_b_params_t params;
        nixl_status_t st = probe.getPluginParams(backend, mems, params);
        if (st != NIXL_SUCCESS) {
            put_err(err, errlen, std::string("getPluginParams(") + backend + ") returned " +
                    nixlEnumStrings::statusStr(st));
            return st;
        }
        std::string s;
        for (const auto &[k, v] : params) s += k + "=" + v + "\n";
        *out = static_cast<char *>(std::malloc(s.size() + 1));
        std::memcpy(*out, s.c_str(), s.size() + 1);
        *len = s.size();
        return NIXL_SUCCESS;
    } catch (const std::exception &e) {
        put_err(err, errlen, e.what());
    } catch (...) {
        put_err(err, errlen, "unknown C++ exception");
    }
    return CX_EXCEPTION;
}

int
cx_register(cx_agent *a, uint64_t addr, uint64_t len) {
    try {
        nixl_reg_dlist_t d(DRAM_SEG);
        dram_reg(addr, len, d);
        return a->agent->registerMem(d, &a->only);
    } catch (...) {
        return CX_EXCEPTION;
    }
}

int
cx_deregister(cx_agent *a, uint64_t addr, uint64_t len) {
    try {
        nixl_reg_dlist_t d(DRAM_SEG);
        dram_reg(addr, len, d);
        return a->agent->deregisterMem(d, &a->only);
    } catch (...) {
        return CX_EXCEPTION;
    }
}

int
cx_local_md(cx_agent *a, void **out, size_t *len) {
    try {
        nixl_blob_t md;
        nixl_status_t st = a->agent->getLocalMD(md);
        if (st != NIXL_SUCCESS) return st;
        *out = std::malloc(md.size() ? md.size() : 1);
        std::memcpy(*out, md.data(), md.size());
        *len = md.size();
        return NIXL_SUCCESS;
    } catch (...) {
        return CX_EXCEPTION;
    }
}

int
cx_load_md(cx_agent *a, const void *md, size_t len, char *name, size_t cap) {
    try {
        std::string got;
        nixl_status_t st =
            a->agent->loadRemoteMD(nixl_blob_t(static_cast<const char *>(md), len), got);
        put_err(name, cap, got);
        return st;
    } catch (...) {
        return CX_EXCEPTION;
    }
}

int
cx_invalidate_md(cx_agent *a, const char *name) {
    try {
        return a->agent->invalidateRemoteMD(name);
    } catch (...) {
        return CX_EXCEPTION;
    }
}

int
cx_prep(cx_agent *a, const char *agent, int n, const uint64_t *addrs, const uint64_t *lens,
        void **dlist) {
    try {
        nixl_xfer_dlist_t d(DRAM_SEG);
        for (int i = 0; i < n; i++)
            d.addDesc(nixlBasicDesc(static_cast<uintptr_t>(addrs[i]), static_cast<size_t>(lens[i]), 0));
        nixlDlistH *h = nullptr;
        nixl_status_t st = agent == nullptr ? a->agent->prepXferDlist(NIXL_INIT_AGENT, d, h, &a->only) :
                                              a->agent->prepXferDlist(agent, d, h, &a->only);
        if (st == NIXL_SUCCESS) *dlist = h;
        return st;
    } catch (...) {
        return CX_EXCEPTION;
    }
}

int
cx_release_dlist(cx_agent *a, void *dlist) {
    try {
        return a->agent->releasedDlistH(static_cast<nixlDlistH *>(dlist));
    } catch (...) {
        return CX_EXCEPTION;
    }
}

int
cx_post(cx_agent *a, int op, void *local, const int *lidx, void *remote, const int *ridx, int n,
        const void *notif, size_t notif_len, int has_notif, void **req) {
    try {
        std::vector<int> li(lidx, lidx + n), ri(ridx, ridx + n);
        nixl_opt_args_t args;
        args.backends = a->only.backends;
        if (has_notif) args.notif = nixl_blob_t(static_cast<const char *>(notif), notif_len);
        nixlXferReqH *h = nullptr;
        nixl_status_t st = a->agent->makeXferReq(op == 1 ? NIXL_WRITE : NIXL_READ,
                                                 static_cast<nixlDlistH *>(local), li,
                                                 static_cast<nixlDlistH *>(remote), ri, h, &args);
        if (st != NIXL_SUCCESS) return st;
        *req = h;
        return a->agent->postXferReq(h, &args);
    } catch (...) {
        return CX_EXCEPTION;
    }
}

void
cx_status(cx_agent *a, int n, void *const *reqs, int *out) {
    for (int i = 0; i < n; i++) {
        try {
            out[i] = a->agent->getXferStatus(static_cast<nixlXferReqH *>(reqs[i]));
        } catch (...) {
            out[i] = CX_EXCEPTION;
        }
    }
}

int
cx_release_req(cx_agent *a, void *req) {
    try {
        return a->agent->releaseXferReq(static_cast<nixlXferReqH *>(req));
    } catch (...) {
        return CX_EXCEPTION;
    }
}

int
cx_gen_notif(cx_agent *a, const char *agent, const void *msg, size_t len) {
    try {
        return a->agent->genNotif(agent, nixl_blob_t(static_cast<const char *>(msg), len), &a->only);
    } catch (...) {
        return CX_EXCEPTION;
    }
}

int
cx_get_notifs(cx_agent *a, void **out, size_t *len) {
    try {
        nixl_notifs_t m;
        nixl_status_t st = a->agent->getNotifs(m, &a->only);
        *len = 0;
        *out = nullptr;
        size_t total = 0;
        for (const auto &[name, msgs] : m)
            for (const auto &msg : msgs) total += 8 + name.size() + msg.size();
        if (total > 0) {
            char *p = static_cast<char *>(std::malloc(total));
            *out = p;
            for (const auto &[name, msgs] : m) {
                for (const auto &msg : msgs) {
                    uint32_t nl = name.size(), ml = msg.size();
                    std::memcpy(p, &nl, 4);
                    std::memcpy(p + 4, name.data(), nl);
                    p += 4 + nl;
                    std::memcpy(p, &ml, 4);
                    std::memcpy(p + 4, msg.data(), ml);
                    p += 4 + ml;
                }
            }
            *len = total;
        }
        return st;
    } catch (...) {
        return CX_EXCEPTION;
    }
}

void
cx_free(void *p) {
    std::free(p);
}

} // extern "C"
