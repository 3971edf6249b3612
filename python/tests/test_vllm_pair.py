"""End to end: a real vLLM prefill/decode pair on custody hosts (custody.vllm.demo).

Every decode output must equal the reference engine's; under the fake's
faults a request is failed (policy fail) or recomputed to the reference
(policy recompute), never silently different; the negative control (the
prefill's blocks zeroed before the read) must change the output; and at the
end neither host nor either vLLM holds a block.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from custody.vllm import demo

FAULTS = sum(n for kind, n in demo.ROUNDS if kind in demo.FAULTY)
CONTROLS = sum(n for kind, n in demo.ROUNDS if kind == "scribble")


@pytest.fixture(scope="module")
def summaries(custody_bin: Path) -> dict[str, demo.Summary]:
    return {s.policy: s for s in demo.run_demo(str(custody_bin), ["fail", "recompute"])}


@pytest.mark.parametrize("policy", ["fail", "recompute"])
def test_outputs_identical_or_handled(summaries: dict[str, demo.Summary], policy: str) -> None:
    s = summaries[policy]
    print("\n".join(s.lines()))
    assert s.wrong == [], "outputs that differ from the reference without being reported"
    assert s.unreported == []
    total = sum(n for _, n in demo.ROUNDS)
    assert s.requests == total
    if policy == "fail":
        assert (s.identical, s.failed) == (total - FAULTS - CONTROLS, FAULTS)
    else:
        assert (s.identical, s.failed) == (total - CONTROLS, 0)


@pytest.mark.parametrize("policy", ["fail", "recompute"])
def test_control_detected(summaries: dict[str, demo.Summary], policy: str) -> None:
    assert summaries[policy].control == "detected"


@pytest.mark.parametrize("policy", ["fail", "recompute"])
def test_nothing_held(summaries: dict[str, demo.Summary], policy: str) -> None:
    s = summaries[policy]
    assert s.leaks == []
    assert (s.fences, s.restarts) == (2, 2), (
        "the SIGKILL and the hold cap each fence the decode's transport once"
    )


def test_tensor_parallel_pair(custody_bin: Path) -> None:
    """Two ranks a side, a custody host per rank: decode rank r reads
    prefill rank r's share of every block, vLLM counts both workers'
    completions, and every output equals a reference of the same TP."""
    s = demo.run_tp(str(custody_bin), tp=2)
    print("\n".join(s.lines()))
    assert (s.requests, s.identical, s.wrong, s.unreported, s.leaks) == (6, 6, [], [], [])
