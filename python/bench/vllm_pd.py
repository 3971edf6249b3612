"""Decode time to first token through custody against vLLM's NixlConnector.

    .venv/bin/python python/bench/vllm_pd.py [--rounds 5] [--prompts 16]

Runs, on this machine, a prefill and a decode vLLM engine (the tiny Llama
of custody.vllm.engine) per backend — custody over the fake transport,
custody over the UCX transport, NixlConnector over NIXL's UCX (from the
nixl wheel) — one backend at a time, the backends alternating round by
round. In each round the prefill computes the prompts and the decode takes
half of them one at a time with max_tokens=1: the decode's time to first
token is the time of that call (the KV read, one token's compute, and the
same pipe round trip to the engine process for every backend); then the
other half at once, for requests per second. Prints per backend the median
over rounds of the per-round median TTFT, and the ratios against
NixlConnector.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

from custody.hosts import HostProcess, free_port
from custody.vllm.demo import connector, prompts
from custody.vllm.engine import Engine, EngineSpec, make_model


def nixl(port: int, host_ip: str = "127.0.0.1") -> tuple[dict[str, Any], dict[str, str]]:
    """NixlConnector's kv_transfer_config and environment for one engine."""
    return (
        {"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_buffer_device": "cpu"},
        {"VLLM_NIXL_SIDE_CHANNEL_PORT": str(port), "VLLM_NIXL_SIDE_CHANNEL_HOST": host_ip},
    )


def start_pair(
    b: str, custody: str, d: str, model: str, r: int
) -> tuple[Engine, Engine, list[HostProcess]]:
    """Backend b's prefill and decode engines (and hosts), ready."""
    hosts: list[HostProcess] = []
    if b.startswith("custody-"):
        transport = b.removeprefix("custody-")
        params = {"dir": d} if transport == "fake" else {}
        for side in ("p", "d"):
            hosts.append(
                HostProcess(
                    f"{b}-{side}{r}",
                    os.path.join(d, f"{b}-{side}{r}"),
                    custody,
                    transport=transport,
                    params=dict(params),
                    state_dir=os.path.join(d, "state"),
                ).start()
            )
        p = Engine(EngineSpec(f"{b}-prefill", model, connector(hosts[0], "fail", 60)))
        q = Engine(EngineSpec(f"{b}-decode", model, connector(hosts[1], "fail", 60)))
    elif b == "nixl":
        (kp, ep), (kd, ed) = nixl(free_port()), nixl(free_port())
        p = Engine(EngineSpec("nixl-prefill", model, kp, env=ep))
        q = Engine(EngineSpec("nixl-decode", model, kd, env=ed))
    else:
        raise SystemExit(f"unknown backend {b}")
    p.wait_ready()
    q.wait_ready()
    return p, q, hosts


def measure(p: Engine, q: Engine, n: int, offset: int) -> tuple[float, float]:
    """(median TTFT of n/2 sequential decodes, requests/s of n/2 at once)."""
    ps = prompts(n, offset=offset)
    handoff = [o.kv_transfer_params for o in p.generate(ps, 1, [{"do_remote_decode": True}] * n)]
    times = []
    for x, h in zip(ps[: n // 2], handoff[: n // 2]):
        t = time.perf_counter()
        q.generate([x], 1, [h])
        times.append(time.perf_counter() - t)
    t = time.perf_counter()
    q.generate(ps[n // 2 :], 1, handoff[n // 2 :])
    return statistics.median(times), (n - n // 2) / (time.perf_counter() - t)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--custody", default=os.path.join(os.environ.get("CUSTODY_BIN", "bin"), "custody")
    )
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--backends", default="custody-fake,custody-ucx,nixl")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="custody-vllm-bench-")
    model = make_model(os.path.join(d, "model"))
    backends = a.backends.split(",")
    ttft: dict[str, list[float]] = {b: [] for b in backends}
    rps: dict[str, list[float]] = {b: [] for b in backends}
    try:
        # One backend's engines at a time, the backends alternating round
        # by round: NIXL's progress threads spin, and would take the cores
        # of every other engine on this machine.
        for r in range(a.rounds):
            for b in backends:
                p, q, hosts = start_pair(b, a.custody, d, model, r)
                try:
                    measure(p, q, a.prompts, offset=100_000 + r)  # warm up
                    t, x = measure(p, q, a.prompts, offset=1000 * r)
                    ttft[b].append(t)
                    rps[b].append(x)
                finally:
                    p.stop()
                    q.stop()
                    for h in hosts:
                        h.stop()
        base = statistics.median(ttft["nixl"]) if "nixl" in ttft else None
        for b in backends:
            m = statistics.median(ttft[b])
            ratio = f"  {m / base:.2f}x NixlConnector" if base else ""
            print(
                f"{b:14s} decode TTFT p50 {m * 1e3:7.2f} ms "
                f"(rounds {', '.join(f'{x * 1e3:.2f}' for x in ttft[b])}){ratio}; "
                f"{statistics.median(rps[b]):6.1f} requests/s"
            )
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
