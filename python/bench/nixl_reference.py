"""NIXL driven directly through the API of NIXL's wheel (``nixl``, from the
package registry), without custody: the NIXL-direct reference that ``custody
bench nixl`` compares against where custody-nixl-reference (make test-nixl
builds it) was not built. It takes the same
arguments and prints the same result line as that program:

    nixl_reference.py bw -size N -op write|read -depth D -min-time T [-param k=v ...]
        prints: reference size=N op=write depth=D mibps=X
    nixl_reference.py lat -size N -min-time T [-param k=v ...]
        prints: reference size=N op=write p50_ns=X p99_ns=Y n=K
    nixl_reference.py version
        prints: the NIXL wheel, its module and the UCX it bundles

Two agents in two processes (this one, and a copy of itself it starts as the
target), each with a 64 MiB region file in /dev/shm mapped shared, as
custody's pools; one NIXL request per transfer (make_prepped_xfer, transfer,
check_xfer_state until DONE, release_xfer_handle), the way vLLM's
NixlConnector drives NIXL. The parameters are the transport's: tls becomes
UCX_TLS, backend names the backend (UCX), every other one is passed to
create_backend unchanged (ucx_error_handling_mode, ...). The agents run
NIXL's progress thread with the wheel's default settings.

Each call into NIXL here costs a Python call on top of NIXL's own: the
latency it prints is an upper bound of NIXL's, by that much (about a
microsecond per call on this kind of machine, measured by ``lat`` with a
size NIXL completes inside transfer()).
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

REGION_BYTES = 64 << 20
BENCH_PAUSE = 50e-6  # custody bench's first pause between status rounds


def parse(argv: list[str]) -> tuple[str, argparse.Namespace, dict[str, str]]:
    """The mode, the flags and the parameters, refusing bad ones."""
    if not argv or argv[0] not in ("bw", "lat", "target", "version"):
        raise SystemExit("usage: nixl_reference.py bw|lat|target|version [flags]")
    ap = argparse.ArgumentParser(prog=f"nixl_reference.py {argv[0]}")
    ap.add_argument("-size", type=int, default=4 << 10, help="bytes per transfer")
    ap.add_argument("-op", default="write", choices=("write", "read"))
    ap.add_argument("-depth", type=int, default=1, help="transfers in flight (bw), in two groups")
    ap.add_argument("-min-time", dest="min_time", default="1s", help="least time measured")
    ap.add_argument("-param", action="append", default=[], help="transport parameter k=v")
    a = ap.parse_args(argv[1:])
    params: dict[str, str] = {}
    for kv in a.param:
        k, sep, v = kv.partition("=")
        if not sep or not k:
            ap.error(f"parameter {kv!r}: want k=v")
        params[k] = v
    a.min_time = duration(a.min_time)
    if argv[0] in ("bw", "lat") and not (
        0 < a.size <= REGION_BYTES and a.depth >= 1 and a.depth * a.size <= REGION_BYTES
    ):
        ap.error(f"-size {a.size} and -depth {a.depth} must fit {REGION_BYTES} bytes")
    return argv[0], a, params


def duration(s: str) -> float:
    """A Go duration of one unit (as custody bench passes it) in seconds."""
    for unit, scale in (("ms", 1e-3), ("us", 1e-6), ("µs", 1e-6), ("ns", 1e-9), ("s", 1.0)):
        if s.endswith(unit):
            try:
                return float(s[: -len(unit)]) * scale
            except ValueError:
                break
    raise SystemExit(f"-min-time {s!r}: want a duration such as 1s or 500ms")


INITIATOR_BYTE, TARGET_BYTE = 0xA5, 0x5A  # what each side's region holds at start


class Region:
    """A region file in /dev/shm, mapped shared, every byte set to fill."""

    def __init__(self, fill: int) -> None:
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        fd, self.path = tempfile.mkstemp(prefix="custody-nixl-ref-", dir=base)
        try:
            os.ftruncate(fd, REGION_BYTES)
            self.map = mmap.mmap(fd, REGION_BYTES, mmap.MAP_SHARED)
        finally:
            os.close(fd)
        self.map.write(bytes([fill]) * REGION_BYTES)
        self._anchor = ctypes.c_char.from_buffer(self.map)
        self.addr = ctypes.addressof(self._anchor)

    def free(self) -> None:
        del self._anchor
        self.map.close()
        os.remove(self.path)


def open_agent(name: str, params: dict[str, str], fill: int) -> tuple[Any, Region, Any]:
    """An agent with its backend, and a registered region."""
    if params.get("tls"):
        os.environ["UCX_TLS"] = params["tls"]
    # NIXL logs every agent and backend it makes to stdout, where the
    # result line goes.
    os.environ.setdefault("NIXL_LOG_LEVEL", "WARN")
    from nixl._api import nixl_agent, nixl_agent_config

    backend = params.get("backend", "UCX")
    init = {k: v for k, v in params.items() if k not in ("backend", "tls", "progress_delay")}
    ag = nixl_agent(name, nixl_agent_config(backends=[]))
    ag.create_backend(backend, init)
    reg = Region(fill)
    descs = ag.register_memory([(reg.addr, REGION_BYTES, 0, "")], "DRAM")
    return ag, reg, descs


def target(params: dict[str, str]) -> None:
    """The passive agent: prints its metadata and region address, and lives
    until its stdin closes."""
    ag, reg, descs = open_agent("nixl-ref-target", params, TARGET_BYTE)
    try:
        sys.stdout.write(f"target {ag.get_agent_metadata().hex()} {reg.addr} {reg.path}\n")
        sys.stdout.flush()
        sys.stdin.readline()
    finally:
        ag.deregister_memory(descs)
        reg.free()


class Initiator:
    """The active agent and its target process."""

    def __init__(self, params: dict[str, str]) -> None:
        args = [sys.executable, os.path.abspath(__file__), "target"]
        for k, v in params.items():
            args += ["-param", f"{k}={v}"]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        # NIXL logs to stdout too: the target's line is the one it marks.
        f: list[str] = []
        for line in self.proc.stdout:
            f = line.split()
            if len(f) == 4 and f[0] == "target":
                break
        else:
            self.proc.kill()
            raise SystemExit(f"the target ended before it printed its metadata (last line: {f!r})")
        self.remote, self.remote_path = int(f[2]), f[3]
        self.ag, self.reg, self.descs = open_agent("nixl-ref-initiator", params, INITIATOR_BYTE)
        self.peer = self.ag.add_remote_agent(bytes.fromhex(f[1]))

    def stop(self) -> None:
        self.ag.remove_remote_agent(self.peer)
        self.ag.deregister_memory(self.descs)
        self.reg.free()
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)

    def dlists(self, size: int, n: int) -> tuple[Any, Any]:
        """n descriptors of size bytes on both sides."""
        local = [(self.reg.addr + i * size, size, 0) for i in range(n)]
        remote = [(self.remote + i * size, size, 0) for i in range(n)]
        return (
            self.ag.prep_xfer_dlist("NIXL_INIT_AGENT", local, "DRAM"),
            self.ag.prep_xfer_dlist(self.peer, remote, "DRAM"),
        )

    def check(self, op: str, n: int) -> None:
        """Raises unless the first n bytes of the side written to hold the
        other side's bytes: a figure of transfers that moved nothing is
        no figure."""
        want, path = (INITIATOR_BYTE, self.remote_path) if op == "WRITE" else (TARGET_BYTE, "")
        if path:
            with open(path, "rb") as f:
                got = f.read(n)
        else:
            got = self.reg.map[:n]
        if got != bytes([want]) * n:
            bad = next(i for i, b in enumerate(got) if b != want) if len(got) == n else len(got)
            raise SystemExit(f"{op}: byte {bad} of {n} did not arrive")

    def post(self, op: str, local: Any, remote: Any, i: int) -> Any:
        """One transfer of descriptor i, posted."""
        h = self.ag.make_prepped_xfer(op, local, [i], remote, [i])
        if self.ag.transfer(h) == "ERR":
            raise RuntimeError(f"{op} {i}: transfer failed")
        return h

    def bandwidth(self, op: str, size: int, depth: int, min_time: float) -> float:
        """depth transfers of one descriptor each in flight in two groups, as
        custody bench keeps them: while one group runs, the other is polled
        (pausing 50 us, growing to 1/32 of the group's last time) until all
        are done, released and posted again; at least min_time after a
        warm-up round. MiB/s."""
        local, remote = self.dlists(size, depth)
        half = max(1, depth // 2)
        groups = [(0, half), (half, depth)] if half < depth else [(0, depth)]
        last = 0.0

        def wait(reqs: list[Any]) -> None:
            nonlocal last
            posted, pause = time.perf_counter(), BENCH_PAUSE
            pending = list(reqs)
            while pending:
                nxt = []
                for h in pending:
                    st = self.ag.check_xfer_state(h)
                    if st == "ERR":
                        raise RuntimeError(f"{op}: transfer failed")
                    if st != "DONE":
                        nxt.append(h)
                pending = nxt
                if pending:
                    time.sleep(pause)
                    pause = min(2 * pause, max(BENCH_PAUSE, last / 32))
            last = time.perf_counter() - posted
            for h in reqs:
                self.ag.release_xfer_handle(h)

        def rounds(n_rounds: int, least: float) -> tuple[int, float]:
            inflight = [[self.post(op, local, remote, i) for i in range(*g)] for g in groups]
            start, n, g = time.perf_counter(), 0, 0
            while True:
                wait(inflight[g])
                n += groups[g][1] - groups[g][0]
                if n >= n_rounds * depth and time.perf_counter() - start >= least:
                    for k in range(1, len(groups)):
                        o = (g + k) % len(groups)
                        wait(inflight[o])
                        n += groups[o][1] - groups[o][0]
                    return n, time.perf_counter() - start
                inflight[g] = [self.post(op, local, remote, i) for i in range(*groups[g])]
                g = (g + 1) % len(groups)

        try:
            rounds(1, 0.0)
            self.check(op, depth * size)
            n, el = rounds(4, min_time)
        finally:
            self.ag.release_dlist_handle(local)
            self.ag.release_dlist_handle(remote)
        return n * size / el / (1 << 20)

    def latency(self, op: str, size: int, min_time: float) -> tuple[int, int, int]:
        """One transfer at a time, spinning on check_xfer_state until DONE;
        100 warm-up transfers, then at least 100 and min_time. The p50 and
        p99 of Post to DONE in ns (the release is not timed), and the count."""
        local, remote = self.dlists(size, 1)
        times: list[int] = []
        try:
            warm, start = 100, 0.0
            while warm > 0 or len(times) < 100 or time.perf_counter() - start < min_time:
                if warm == 0 and start == 0.0:
                    start = time.perf_counter()
                t0 = time.perf_counter_ns()
                h = self.ag.make_prepped_xfer(op, local, [0], remote, [0])
                st = self.ag.transfer(h)
                while st != "DONE":
                    if st == "ERR":
                        raise RuntimeError(f"{op}: transfer failed")
                    st = self.ag.check_xfer_state(h)
                took = time.perf_counter_ns() - t0
                self.ag.release_xfer_handle(h)
                if warm > 0:
                    warm -= 1
                else:
                    times.append(took)
            self.check(op, size)
        finally:
            self.ag.release_dlist_handle(local)
            self.ag.release_dlist_handle(remote)
        times.sort()
        return (
            times[len(times) // 2],
            times[min(len(times) - 1, len(times) * 99 // 100)],
            len(times),
        )


def version() -> str:
    """The NIXL wheel, the module it loads here (by CUDA version) and the
    version of the UCX that module bundles."""
    import importlib.metadata
    import pathlib

    from nixl import _api

    mod = _api.__name__.split(".")[0]
    libs = pathlib.Path(_api.__file__).parent.parent / f"{mod}.libs"
    ucx = "unknown"
    found = {n: sorted(libs.glob(f"lib{n}-*.so*")) for n in ("ucs", "uct", "ucp")}
    if all(found.values()):
        for n in ("ucs", "uct"):
            ctypes.CDLL(str(found[n][0]), mode=ctypes.RTLD_GLOBAL)
        ucp = ctypes.CDLL(str(found["ucp"][0]))
        ucp.ucp_get_version_string.restype = ctypes.c_char_p
        ucx = ucp.ucp_get_version_string().decode()
    return f"nixl {importlib.metadata.version('nixl')} ({mod}), UCX {ucx}"


def main() -> None:
    """Runs one mode and prints its result line."""
    mode, a, params = parse(sys.argv[1:])
    if mode == "target":
        target(params)
        return
    if mode == "version":
        print(version())
        return
    op = a.op.upper()
    ini = Initiator(params)
    try:
        if mode == "bw":
            mibps = ini.bandwidth(op, a.size, a.depth, a.min_time)
            print(f"reference size={a.size} op={a.op} depth={a.depth} mibps={mibps:.1f}")
        else:
            p50, p99, n = ini.latency(op, a.size, a.min_time)
            print(f"reference size={a.size} op={a.op} p50_ns={p50} p99_ns={p99} n={n}")
    finally:
        ini.stop()


if __name__ == "__main__":
    main()
    # The wheel's bundled libnl crashes in its own destructor at exit
    # (rtnl_tc_unregister, from _dl_fini) after a run over tcp: leave
    # without running the libraries' destructors, once every agent,
    # region and the target process are done with and the output is out.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
