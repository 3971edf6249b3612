"""``python -m custody.vllm.demo``: a vLLM prefill/decode pair on custody.

Three vLLM engines on this machine — a reference that prefills and decodes
itself, a prefill and a decode, the last two with CustodyConnector over two
``custody serve`` hosts with the fake transport — run the same prompts,
greedy. Every decode output must equal the reference's. Then the decode
host's transport injects faults, request by request: a transfer that
fails, one that disconnects, one stalled until its transport process is
SIGKILLed, one stalled past the hold cap; and the decode's host itself is
SIGKILLed and started again between two requests. Under
``kv_load_failure_policy`` "fail" each faulty request must be reported
failed; under "recompute" it must give the reference's tokens anyway. One
request's prefill blocks are zeroed before the read (the negative
control): its output must differ. No output may differ silently, and at the
end neither host nor either vLLM may hold a block.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

from custody.client import Client
from custody.hosts import HostProcess, free_port
from custody.vllm.engine import Engine, EngineSpec, Output, make_model

# The decode transport's fault rules, by the number of the transfer they
# hit: the first CLEAN transfers of each transport process run clean, the
# next ones fail, disconnect and stall (forever). A fence restarts the
# process, whose count starts again, so each process sees every rule.
CLEAN = 4
FAULTS = [
    f"fail,after=0,post={CLEAN + 1}",
    f"disconnect,after=0,post={CLEAN + 2}",
    f"stall,post={CLEAN + 3}",
]
# What the rounds of requests meet: the first transport process's stall is
# ended by a SIGKILL, the second's by the hold cap.
# A "scribble" request is the negative control: its prefill blocks are
# zeroed before the decode reads them, as a connector that let vLLM reuse
# them would, and its output must then differ from the reference (a check
# that could not see that would pass anything).
ROUNDS = [
    ("clean", CLEAN),
    ("fail", 1),
    ("disconnect", 1),
    ("kill", 1),
    ("clean", CLEAN - 1),
    ("scribble", 1),
    ("fail", 1),
    ("disconnect", 1),
    ("hold-cap", 1),
    # Read after the decode's host was SIGKILLed and started again: the
    # connector registers the KV cache with the new host process.
    ("host-restart", 1),
]
FAULTY = {"fail", "disconnect", "kill", "hold-cap"}


@dataclass
class Summary:
    """What a run found."""

    policy: str
    requests: int = 0
    identical: int = 0
    failed: int = 0
    wrong: list[str] = field(default_factory=list)
    unreported: list[str] = field(default_factory=list)
    control: str = ""
    fences: int = 0
    restarts: int = 0
    host_restarts: int = 0
    leaks: list[str] = field(default_factory=list)

    def ok(self) -> bool:
        """No output differed silently, every fault was answered as the
        policy says, nothing leaked."""
        return (
            not self.wrong and not self.unreported and not self.leaks and self.control == "detected"
        )

    def lines(self) -> list[str]:
        """The summary as custody demo prints it."""
        return (
            [
                f"policy     {self.policy}",
                f"requests   {self.requests}",
                f"identical  {self.identical}",
                f"failed     {self.failed}",
                f"wrong      {len(self.wrong)}",
                f"control    {self.control or 'not run'} (zeroed prefill blocks change the output)",
                f"unanswered {len(self.unreported)}",
                f"fences     {self.fences} (transport restarts {self.restarts}, host restarts {self.host_restarts})",
                f"leaks      {len(self.leaks)}",
            ]
            + [f"  wrong: {w}" for w in self.wrong]
            + [f"  unanswered: {u}" for u in self.unreported]
            + [f"  leak: {x}" for x in self.leaks]
        )


def prompts(n: int, offset: int = 0) -> list[list[int]]:
    """n distinct prompts of 20 to 80 token ids."""
    return [
        [(7 * i + 3 * j + offset) % 500 + 3 for j in range(20 + (i * 13) % 61)] for i in range(n)
    ]


def connector(host: HostProcess, policy: str, lease_s: float) -> dict[str, object]:
    """The kv_transfer_config of an engine on host."""
    return {
        "kv_connector": "CustodyConnector",
        "kv_connector_module_path": "custody.vllm",
        "kv_role": "kv_both",
        "kv_load_failure_policy": policy,
        "kv_connector_extra_config": {
            "socket": host.socket,
            "address": host.address,
            "lease_s": lease_s,
        },
    }


def _kill_transport_when_busy(host: HostProcess, done: threading.Event) -> None:
    """SIGKILL host's transport process once a transfer is in flight."""
    with Client(host.socket) as c:
        deadline = time.monotonic() + 60
        while not done.is_set() and time.monotonic() < deadline:
            st = c.status(timeout=5)
            if st.in_flight > 0 and st.transport_pid > 0:
                os.kill(st.transport_pid, 9)
                return
            done.wait(0.005)


def run(
    custody: str,
    d: str,
    policy: str,
    reference: list[Output],
    all_prompts: list[list[int]],
    prefill: Engine,
    prefill_host: HostProcess,
    cap_s: float,
    max_tokens: int,
    settle_s: float,
) -> Summary:
    """One decode engine under policy, on a host of its own (a host serves
    one engine process: its pool cannot be registered twice), against the
    running prefill."""
    s = Summary(policy=policy)
    decode_host = HostProcess(
        f"decode-{policy}",
        os.path.join(d, f"decode-{policy}"),
        custody,
        cap_s=cap_s,
        params={"fault": ";".join(FAULTS), "dir": prefill_host.params["dir"]},
        state_dir=prefill_host.state_dir,
    ).start()
    decode = Engine(
        EngineSpec(f"decode-{policy}", prefill.spec.model, connector(decode_host, policy, 1))
    )
    try:
        decode.wait_ready()
        i = 0
        for kind, n in ROUNDS:
            for _ in range(n):
                done = threading.Event()
                killer = None
                if kind == "kill":
                    killer = threading.Thread(
                        target=_kill_transport_when_busy, args=(decode_host, done)
                    )
                    killer.start()
                # Each request is handed off right before the decode reads
                # it, well within the prefill's lease (a decode that comes
                # later computes the prompt: read_margin_s).
                handoff = prefill.generate([all_prompts[i]], 1, [{"do_remote_decode": True}])[
                    0
                ].kv_transfer_params
                if handoff is None:
                    raise RuntimeError(
                        f"the prefill handed request {i} off with no kv_transfer_params"
                    )
                if kind == "host-restart":
                    count_fences(s, decode_host)
                    decode_host.restart()
                    s.host_restarts += 1
                if kind == "scribble":
                    prefill.scribble(handoff["remote_block_ids"])
                out = decode.generate([all_prompts[i]], max_tokens, [handoff])[0]
                done.set()
                if killer is not None:
                    killer.join()
                s.requests += 1
                judge(s, kind, i, out, reference[i], policy)
                i += 1
        leaks(s, [prefill, decode], [prefill_host, decode_host], settle_s)
        count_fences(s, decode_host)
    finally:
        decode.stop()
        decode_host.stop()
    return s


def count_fences(s: Summary, h: HostProcess) -> None:
    """Add h's fences and transport restarts so far to s."""
    with Client(h.socket) as c:
        st = c.status(timeout=5)
    s.fences, s.restarts = s.fences + int(st.fences), s.restarts + int(st.transport_restarts)


def judge(s: Summary, kind: str, i: int, out: Output, ref: Output, policy: str) -> None:
    """Count one decode output against the reference."""
    if kind == "scribble":
        s.control = "detected" if out.tokens != ref.tokens else "MISSED"
        return
    if out.tokens == ref.tokens:
        s.identical += 1
        if kind in FAULTY and policy == "fail":
            s.unreported.append(
                f"request {i} ({kind}) gave tokens though its load failed under policy fail"
            )
        return
    if not out.tokens and out.finish_reason == "error":
        s.failed += 1
        if kind not in FAULTY:
            s.unreported.append(f"request {i} ({kind}) failed without a fault")
        elif policy == "recompute":
            s.unreported.append(
                f"request {i} ({kind}) failed though policy recompute recomputes it"
            )
        return
    s.wrong.append(
        f"request {i} ({kind}): {out.tokens} ({out.finish_reason}) != reference {ref.tokens}"
    )


def leaks(s: Summary, engines: list[Engine], hosts: list[HostProcess], wait_s: float) -> None:
    """Nothing held: by any host (Status), by any vLLM (its block pool)."""
    for e in engines:
        if e.settle(wait_s):
            s.leaks.append(
                f"vLLM {e.spec.name}: requests still wait for the connector after {wait_s} s"
            )
    for h in hosts:
        with Client(h.socket) as c:
            deadline = time.monotonic() + wait_s
            while True:
                st = c.status(timeout=5)
                held = {
                    k: getattr(st, k)
                    for k in ("in_flight", "retained", "retired", "quarantined_blocks", "requests")
                }
                if not any(held.values()) or time.monotonic() > deadline:
                    break
                time.sleep(0.05)  # a lease or a fence of another process runs out
        if any(held.values()):
            s.leaks.append(f"host {h.name} holds {held}")
    for e in engines:
        free, usable = e.blocks()
        if free != usable:
            s.leaks.append(f"vLLM {e.spec.name}: {usable - free} of {usable} blocks not free")


def run_demo(
    custody: str, policies: list[str], max_tokens: int = 8, keep: bool = False
) -> list[Summary]:
    """Run the demo under each policy; the hosts' directory is removed
    unless keep or a run failed."""
    d = tempfile.mkdtemp(prefix="custody-vllm-demo-")
    # The decode reads only with read_margin_s (5 s by default, above the
    # hold cap) of the prefill's lease left.
    cap_s, lease_s = 3.0, 10.0
    all_prompts = prompts(sum(k for _, k in ROUNDS))
    # Both hosts' fakes keep their files in d, which each allows its peer's
    # files in (the fake's peer_dirs holds its dir).
    pre_host = HostProcess(
        "prefill",
        os.path.join(d, "prefill"),
        custody,
        params={"dir": d},
        state_dir=os.path.join(d, "state"),
    ).start()
    model = make_model(os.path.join(d, "model"))
    ref = Engine(EngineSpec("reference", model))
    prefill = Engine(EngineSpec("prefill", model, connector(pre_host, "fail", lease_s)))
    out: list[Summary] = []
    try:
        ref.wait_ready()
        reference = ref.generate(all_prompts, max_tokens)
        ref.stop()
        prefill.wait_ready()
        for policy in policies:
            out.append(
                run(
                    custody,
                    d,
                    policy,
                    reference,
                    all_prompts,
                    prefill,
                    pre_host,
                    cap_s,
                    max_tokens,
                    lease_s + cap_s + 10,
                )
            )
    finally:
        ref.stop()
        prefill.stop()
        pre_host.stop()
        if keep or not all(s.ok() for s in out) or len(out) != len(policies):
            print(f"vllm-demo: hosts' configs and logs in {d}", file=sys.stderr)
        else:
            shutil.rmtree(d, ignore_errors=True)
    return out


def run_tp(custody: str, tp: int = 2, n: int = 6, max_tokens: int = 8) -> Summary:
    """A prefill and a decode of tp ranks each, one custody host per rank,
    without faults: every output must equal a reference engine of the same
    tp (the same sharding gives the same numerics), and nothing is held at
    the end."""
    d = tempfile.mkdtemp(prefix="custody-vllm-tp-")
    s = Summary(policy=f"fail, tp={tp}")
    model = make_model(os.path.join(d, "model"))
    state = os.path.join(d, "state")
    hosts: dict[str, list[HostProcess]] = {}
    engines: list[Engine] = []
    try:
        for side in ("prefill", "decode"):
            base = _free_port_base(tp)
            hosts[side] = [
                HostProcess(
                    f"{side}-{r}",
                    os.path.join(d, f"{side}-{r}"),
                    custody,
                    params={"dir": d},
                    state_dir=state,
                    socket=os.path.join(d, f"{side}-{r}.sock"),
                    address=f"127.0.0.1:{base}{r}",
                ).start()
                for r in range(tp)
            ]

        def kv(side: str) -> dict[str, object]:
            return {
                "kv_connector": "CustodyConnector",
                "kv_connector_module_path": "custody.vllm",
                "kv_role": "kv_both",
                "kv_load_failure_policy": "fail",
                "kv_connector_extra_config": {
                    "socket": os.path.join(d, side + "-{rank}.sock"),
                    "address": hosts[side][0].address[:-1] + "{rank}",
                },
            }

        ref = Engine(EngineSpec("reference", model, tp=tp))
        engines.append(ref)
        ref.wait_ready()
        all_prompts = prompts(n)
        reference = ref.generate(all_prompts, max_tokens)
        ref.stop()
        prefill = Engine(EngineSpec("prefill", model, kv("prefill"), tp=tp))
        decode = Engine(EngineSpec("decode", model, kv("decode"), tp=tp))
        engines += [prefill, decode]
        prefill.wait_ready()
        decode.wait_ready()
        pre = prefill.generate(all_prompts, 1, [{"do_remote_decode": True}] * n)
        for i, (prompt, handed) in enumerate(zip(all_prompts, pre, strict=True)):
            out = decode.generate([prompt], max_tokens, [handed.kv_transfer_params])[0]
            s.requests += 1
            judge(s, "clean", i, out, reference[i], "fail")
        s.control = "not run"
        leaks(s, [prefill, decode], hosts["prefill"] + hosts["decode"], 30)
    finally:
        for e in engines:
            e.stop()
        for hs in hosts.values():
            for h in hs:
                h.stop()
        shutil.rmtree(d, ignore_errors=True)
    return s


def _free_port_base(tp: int) -> int:
    """A number b such that the ports b*10 + r (r < tp <= 10) are free."""
    for _ in range(100):
        b = free_port() // 10
        if b * 10 + tp <= 65535 and all(_port_free(b * 10 + r) for r in range(tp)):
            return b
    raise RuntimeError("no run of free loopback ports found")


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Run the demo and print its summaries; exit 1 unless every run is ok."""
    ap = argparse.ArgumentParser(
        prog="python -m custody.vllm.demo", description=(__doc__ or "").split("\n\n")[0]
    )
    ap.add_argument(
        "--custody",
        default=os.path.join(os.environ.get("CUSTODY_BIN", "bin"), "custody"),
        help="the custody binary (default $CUSTODY_BIN/custody, else bin/custody)",
    )
    ap.add_argument(
        "--policy",
        choices=["fail", "recompute", "both"],
        default="both",
        help="kv_load_failure_policy of the decode engine",
    )
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--keep", action="store_true", help="keep the hosts' directory (configs, logs)")
    a = ap.parse_args(argv)
    policies = ["fail", "recompute"] if a.policy == "both" else [a.policy]
    summaries = run_demo(a.custody, policies, a.max_tokens, a.keep)
    for s in summaries:
        print("\n".join(s.lines()))
    ok = len(summaries) == len(policies) and all(s.ok() for s in summaries)
    print(
        "vllm-demo: every output identical or handled as the policy says, nothing leaked"
        if ok
        else "vllm-demo: FAILED",
        file=sys.stderr,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
