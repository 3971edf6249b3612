"""Decode time to first token through custody against vLLM's NixlConnector.

    .venv/bin/python python/bench/vllm_pd.py [--rounds 5] [--prompts 16]

Starts, on this machine, a prefill and a decode vLLM engine (the tiny Llama
of custody.vllm.engine) per backend: custody over the fake transport,
custody over the UCX transport, and NixlConnector over NIXL's UCX (from
the nixl wheel). Every engine stays up; then, round after round with the
backends alternating, the prefill computes the prompts and the decode takes
them one at a time with max_tokens=1: the decode's time to first token is
the time of that call (the KV read, one token's compute, and the same pipe
round trip to the engine process for every backend). Then all prompts at
once, for requests per second. Prints per backend the median over rounds of
the per-round median TTFT, and the ratios against NixlConnector.
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
    hosts: list[HostProcess] = []
    pairs: dict[str, tuple[Engine, Engine]] = {}
    try:
        for b in a.backends.split(","):
            if b.startswith("custody-"):
                transport = b.removeprefix("custody-")
                params = {"dir": d} if transport == "fake" else {}
                pre = HostProcess(
                    f"{b}-p",
                    os.path.join(d, f"{b}-p"),
                    a.custody,
                    transport=transport,
                    params=dict(params),
                    state_dir=os.path.join(d, "state"),
                ).start()
                dec = HostProcess(
                    f"{b}-d",
                    os.path.join(d, f"{b}-d"),
                    a.custody,
                    transport=transport,
                    params=dict(params),
                    state_dir=os.path.join(d, "state"),
                ).start()
                hosts += [pre, dec]
                pairs[b] = (
                    Engine(EngineSpec(f"{b}-prefill", model, connector(pre, "fail", 60))),
                    Engine(EngineSpec(f"{b}-decode", model, connector(dec, "fail", 60))),
                )
            elif b == "nixl":
                (kp, ep), (kd, ed) = nixl(free_port()), nixl(free_port())
                pairs[b] = (
                    Engine(EngineSpec("nixl-prefill", model, kp, env=ep)),
                    Engine(EngineSpec("nixl-decode", model, kd, env=ed)),
                )
            else:
                raise SystemExit(f"unknown backend {b}")
        for p, q in pairs.values():
            p.wait_ready()
            q.wait_ready()
        ttft: dict[str, list[float]] = {b: [] for b in pairs}
        rps: dict[str, list[float]] = {b: [] for b in pairs}
        for r in range(a.rounds + 1):  # round 0 warms up
            for b, (p, q) in pairs.items():
                ps = prompts(a.prompts, offset=1000 * r)
                handoff = [
                    o.kv_transfer_params
                    for o in p.generate(ps, 1, [{"do_remote_decode": True}] * len(ps))
                ]
                times = []
                for x, h in zip(ps[: a.prompts // 2], handoff[: a.prompts // 2]):
                    t = time.perf_counter()
                    q.generate([x], 1, [h])
                    times.append(time.perf_counter() - t)
                t = time.perf_counter()
                q.generate(ps[a.prompts // 2 :], 1, handoff[a.prompts // 2 :])
                batch = time.perf_counter() - t
                if r:
                    ttft[b].append(statistics.median(times))
                    rps[b].append((a.prompts - a.prompts // 2) / batch)
        base = statistics.median(ttft["nixl"]) if "nixl" in ttft else None
        for b in pairs:
            m = statistics.median(ttft[b])
            ratio = f"  {m / base:.2f}x NixlConnector" if base else ""
            print(
                f"{b:14s} decode TTFT p50 {m * 1e3:7.2f} ms (rounds {', '.join(f'{x * 1e3:.2f}' for x in ttft[b])})"
                f"{ratio}; {statistics.median(rps[b]):6.1f} requests/s"
            )
    finally:
        for p, q in pairs.values():
            p.stop()
            q.stop()
        for h in hosts:
            h.stop()
        shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
