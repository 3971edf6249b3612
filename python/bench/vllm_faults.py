"""The faults both backends can be put through, side by side.

    .venv/bin/python python/bench/vllm_faults.py [--timeout 60]

For custody (fake transport) and for vLLM's NixlConnector (NIXL over UCX),
each on its own prefill and decode vLLM engines (the tiny Llama of
custody.vllm.engine, kv_load_failure_policy "fail"), one request is handed
off by the prefill and then, before the decode reads it, the prefill side
meets one fault:

- prefill-killed: the prefill engine process is SIGKILLed;
- peer-stalls: the process that serves the prefill's memory stops
  (SIGSTOP: custody's prefill transport, NixlConnector's prefill engine,
  which runs its NIXL agent), and continues after the decode's answer;
- agent-restarted: custody's prefill host is SIGKILLed and started again
  (same address); NixlConnector's prefill engine is restarted (a new NIXL
  agent on the same side channel port).

The decode's answer is judged against the same prompt decoded locally:
correct (the reference's tokens), failed (reported failed), corrupted
(other tokens), hang (no answer within --timeout) or crash (the engine
died); then whether the decode still holds blocks (its vLLM block pool,
and for custody its host's Status). Prints a table.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable

from custody.client import Client
from custody.hosts import HostProcess, free_port
from custody.vllm.demo import connector, prompts
from custody.vllm.engine import Engine, EngineSpec, make_model

FAULTS = ("prefill-killed", "peer-stalls", "agent-restarted")


def nixl_spec(name: str, model: str, port: int) -> EngineSpec:
    """An engine with NixlConnector on side channel port."""
    kv = {
        "kv_connector": "NixlConnector",
        "kv_role": "kv_both",
        "kv_buffer_device": "cpu",
        "kv_load_failure_policy": "fail",
    }
    env = {"VLLM_NIXL_SIDE_CHANNEL_PORT": str(port), "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1"}
    return EngineSpec(name, model, kv, env=env)


def judge(
    decode: Engine,
    prompt: list[int],
    params: dict[str, object] | None,
    ref: list[int],
    timeout_s: float,
) -> str:
    """What the decode made of the handed-off request."""
    try:
        out = decode.generate([prompt], 8, [params], timeout_s=timeout_s)[0]
    except TimeoutError:
        return "hang"
    except (RuntimeError, EOFError, BrokenPipeError, OSError):
        return "crash"
    if out.tokens == ref:
        return "correct"
    if not out.tokens and out.finish_reason == "error":
        return "failed"
    return "corrupted"


def held(decode: Engine, host: HostProcess | None) -> str:
    """Blocks the decode side still holds, or 'none'."""
    try:
        if decode.settle(10):
            return "requests wait"
        free, usable = decode.blocks()
    except (RuntimeError, TimeoutError, OSError):
        return "unknown (engine gone)"
    out = [] if free == usable else [f"{usable - free} vLLM blocks"]
    if host is not None:
        with Client(host.socket) as c:
            st = c.status(timeout=5)
        if st.in_flight or st.requests or st.quarantined_blocks:
            out.append(
                f"host: {st.in_flight} in flight, {st.requests} requests, {st.quarantined_blocks} quarantined"
            )
    return ", ".join(out) or "none"


def trial(
    p: Engine,
    q: Engine,
    inject: Callable[[], Callable[[], None]],
    timeout_s: float,
    host: HostProcess | None,
) -> tuple[str, str]:
    """Hand one request off from p to q, inject the fault (which returns
    what undoes it, if anything), and judge q's answer and what q holds."""
    p.wait_ready()
    q.wait_ready()
    prompt = prompts(1, offset=7)[0]
    ref = q.generate([prompt], 8)[0].tokens
    params = p.generate([prompt], 1, [{"do_remote_decode": True}])[0].kv_transfer_params
    resume = inject()
    try:
        outcome = judge(q, prompt, params, ref, timeout_s)
    finally:
        resume()
    return outcome, held(q, host)


def stop(pid: int) -> Callable[[], None]:
    """SIGSTOP pid; returns what continues it."""
    os.kill(pid, signal.SIGSTOP)
    return lambda: os.kill(pid, signal.SIGCONT)


def nothing() -> None:
    """What undoes a fault that needs no undoing."""


def run_custody(d: str, custody: str, model: str, fault: str, timeout_s: float) -> tuple[str, str]:
    """One fault against a custody pair."""
    sd = os.path.join(d, "state")
    pre = HostProcess(
        f"p-{fault}", os.path.join(d, f"p-{fault}"), custody, params={"dir": d}, state_dir=sd
    ).start()
    dec = HostProcess(
        f"d-{fault}",
        os.path.join(d, f"d-{fault}"),
        custody,
        params={"dir": d},
        state_dir=sd,
        cap_s=5,
    ).start()
    p = Engine(EngineSpec(f"custody-prefill-{fault}", model, connector(pre, "fail", 30)))
    q = Engine(EngineSpec(f"custody-decode-{fault}", model, connector(dec, "fail", 30)))

    def inject() -> Callable[[], None]:
        if fault == "prefill-killed":
            p.kill()
        elif fault == "peer-stalls":
            with Client(pre.socket) as c:
                return stop(c.status(timeout=5).transport_pid)
        else:
            pre.restart()
        return nothing

    try:
        return trial(p, q, inject, timeout_s, dec)
    finally:
        q.stop()
        p.stop()
        dec.stop()
        pre.stop()


def run_nixl(model: str, fault: str, timeout_s: float) -> tuple[str, str]:
    """One fault against a NixlConnector pair."""
    port = free_port()
    engines = [
        Engine(nixl_spec(f"nixl-prefill-{fault}", model, port)),
        Engine(nixl_spec(f"nixl-decode-{fault}", model, free_port())),
    ]
    p, q = engines

    def inject() -> Callable[[], None]:
        if fault == "prefill-killed":
            p.kill()
        elif fault == "peer-stalls":
            assert p.proc.pid is not None
            return stop(p.proc.pid)
        else:
            p.kill()
            engines.append(Engine(nixl_spec(f"nixl-prefill-{fault}-again", model, port)))
            engines[-1].wait_ready()
        return nothing

    try:
        return trial(p, q, inject, timeout_s, None)
    finally:
        for e in engines:
            e.stop()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--custody", default=os.path.join(os.environ.get("CUSTODY_BIN", "bin"), "custody")
    )
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds the decode has to answer")
    ap.add_argument("--backends", default="custody,nixl")
    ap.add_argument("--faults", default=",".join(FAULTS))
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="custody-vllm-faults-")
    model = make_model(os.path.join(d, "model"))
    rows = []
    try:
        for fault in a.faults.split(","):
            for b in a.backends.split(","):
                try:
                    if b == "custody":
                        outcome, leak = run_custody(d, a.custody, model, fault, a.timeout)
                    else:
                        outcome, leak = run_nixl(model, fault, a.timeout)
                except Exception as e:  # noqa: BLE001 (a run that could not be carried out is a row too)
                    outcome, leak = f"not run ({type(e).__name__}: {e})", "-"
                rows.append((fault, b, outcome, leak))
                print(f"{fault:16s} {b:8s} {outcome:10s} held: {leak}", flush=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("\n| fault | backend | decode's answer | held afterwards |\n|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
