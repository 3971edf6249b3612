"""CustodyConnector's parts against vLLM's own objects, without engines:
its settings, the layout of vLLM's KV cache as one custody pool, and how the
scheduler side keeps quarantined blocks out of vLLM's real block pool."""

from __future__ import annotations

import pytest
import torch
from vllm.v1.core.block_pool import BlockPool
from vllm.v1.outputs import KVConnectorOutput

from custody.vllm.config import Settings
from custody.vllm.layout import Layout, Regions, describe, shm_allocation
from custody.vllm.metadata import CustodyWorkerMetadata
from custody.vllm.scheduler import SchedulerSide


@pytest.mark.parametrize(
    ("extra", "producer", "field"),
    [
        ({}, False, "socket"),
        ({"socket": ""}, False, "socket"),
        ({"socket": "/s"}, True, "address"),
        ({"socket": "/s", "lease_s": 0}, False, "lease_s"),
        ({"socket": "/s", "lease_s": True}, False, "lease_s"),
        ({"socket": "/s", "peer_timeout_s": -1}, False, "peer_timeout_s"),
        ({"socket": "/s", "pool": ""}, False, "pool"),
        ({"socket": "/s", "sockett": "/x"}, False, "unknown field"),
    ],
)
def test_settings_name_what_is_wrong(extra: dict[str, object], producer: bool, field: str) -> None:
    with pytest.raises((ValueError, TypeError), match=field):
        Settings.parse(extra, producer)


def test_settings_rank_templates() -> None:
    s = Settings.parse({"socket": "/run/h-{rank}.sock", "address": "10.0.0.1:71{rank}0"}, True)
    assert (s.socket_of(3), s.address_of(2)) == ("/run/h-3.sock", "10.0.0.1:7120")


def test_layout_numbers_every_layer_of_a_block_in_one_part() -> None:
    lay = Layout(path="/x", block_bytes=4096, num_blocks=10, layers=3)
    assert lay.to_custody([2, 7]) == [2, 7, 12, 17, 22, 27]
    assert [lay.to_vllm(b) for b in lay.to_custody([2, 7])] == [2, 7, 2, 7, 2, 7]
    with pytest.raises(ValueError, match="vLLM block 10"):
        lay.to_custody([10])
    with pytest.raises(ValueError, match="custody block 30"):
        lay.to_vllm(30)


def _views(
    buf: torch.Tensor, layers: int, blocks: int, shape: tuple[int, ...]
) -> dict[str, torch.Tensor]:
    per = buf.view(torch.float32).view(layers, blocks, *shape)
    return {f"layer.{i}": per[i] for i in range(layers)}


def test_describe_a_shared_memory_kv_cache(tmp_path: object) -> None:
    regions = Regions(str(tmp_path), "t")
    with shm_allocation(regions):
        buf = torch.zeros(2 * 8 * 4 * 16 * 4, dtype=torch.int8, device="cpu")
        other = torch.zeros(3, dtype=torch.float32)  # not the KV cache: unchanged
    try:
        assert regions.find(buf.data_ptr()) is not None and regions.find(other.data_ptr()) is None
        lay = describe(_views(buf, 2, 8, (4, 16)), regions)
        assert (lay.layers, lay.num_blocks, lay.block_bytes) == (2, 8, 4 * 16 * 4)
        buf[lay.to_custody([3])[1] * lay.block_bytes] = 7  # layer 1's share of block 3
        assert _views(buf, 2, 8, (4, 16))["layer.1"][3].flatten().view(torch.int8)[0] == 7
    finally:
        regions.remove()


def test_describe_refuses_a_kv_cache_outside_shared_memory(tmp_path: object) -> None:
    regions = Regions(str(tmp_path), "t")
    buf = torch.zeros(2 * 8 * 64 * 4, dtype=torch.int8)
    with pytest.raises(ValueError, match="layer.0's KV cache is not in shared memory"):
        describe(_views(buf, 2, 8, (64,)), regions)


def test_quarantined_blocks_never_come_back_from_the_block_pool() -> None:
    pool = BlockPool(num_gpu_blocks=8, enable_caching=True, hash_block_size=16)
    side = SchedulerSide(Settings.parse({"socket": "/s"}, False), tp_size=1, num_blocks=8)
    side.bind_block_pool(pool)
    held = pool.get_new_blocks(3)  # a request's blocks
    bad = held[1].block_id
    free_before = pool.get_num_free_blocks()
    side.update_connector_output(
        KVConnectorOutput(kv_connector_worker_meta=CustodyWorkerMetadata({bad}))
    )
    side.update_connector_output(
        KVConnectorOutput(kv_connector_worker_meta=CustodyWorkerMetadata({bad}))
    )
    pool.free_blocks(held)  # the request ends, as vLLM frees it
    assert pool.get_num_free_blocks() == free_before + 2
    every = pool.get_new_blocks(pool.get_num_free_blocks())
    assert bad not in {b.block_id for b in every}, "a quarantined block was allocated again"


def test_worker_metadata_aggregates_as_a_union() -> None:
    a, b = CustodyWorkerMetadata({1, 2}), CustodyWorkerMetadata({2, 5})
    assert a.aggregate(b) == CustodyWorkerMetadata({1, 2, 5})


def test_sweep_removes_only_the_files_of_processes_that_are_gone(tmp_path: object) -> None:
    import os
    import subprocess

    d = str(tmp_path)
    dead = subprocess.Popen(["true"])
    dead.wait()
    names = {
        "gone": f"custody-e-0-{dead.pid}-0123abcd.kv",
        "alive": f"custody-e-0-{os.getppid()}-0123abcd.kv",
        "mine": f"custody-e-0-{os.getpid()}-0123abcd.kv",
        "not ours": f"custody-pool-{dead.pid}.kv",
    }
    for n in names.values():
        open(os.path.join(d, n), "w").close()
    assert Regions(d, "e").sweep() == [os.path.join(d, names["gone"])]
    assert sorted(os.listdir(d)) == sorted(n for k, n in names.items() if k != "gone")


def test_bad_kv_transfer_params_do_not_stop_the_engine() -> None:
    """A client's malformed hand-off: the decode computes the prompt itself
    (SchedulerSide reads only these fields of vLLM's Request)."""
    from types import SimpleNamespace

    side = SchedulerSide(Settings.parse({"socket": "/s"}, False), tp_size=1, num_blocks=8)
    req = SimpleNamespace(
        request_id="r", prompt_token_ids=[1, 2, 3], kv_transfer_params={"do_remote_prefill": True}
    )
    assert side.get_num_new_matched_tokens(req, 0) == (0, False)  # type: ignore[arg-type]
    assert req.kv_transfer_params["do_remote_prefill"] is False


def _handoff(expires_at: float) -> dict[str, object]:
    return {
        "do_remote_prefill": True,
        "remote_request_id": "p",
        "remote_block_ids": [4, 5],
        "remote_hosts": ["127.0.0.1:1"],
        "remote_names": ["prefill"],
        "remote_pool": "kv",
        "remote_num_blocks": 8,
        "remote_token": 7,
        "remote_expires_at": expires_at,
    }


def test_a_decode_past_the_prefills_lease_computes_its_prompt() -> None:
    """The prefill may reuse its blocks once its lease ends: a decode that
    comes within read_margin_s of it (or later) computes the prompt and
    reads nothing; one in time reads."""
    import time
    from types import SimpleNamespace

    side = SchedulerSide(Settings.parse({"socket": "/s", "read_margin_s": 5}, False), 1, 8)
    late = SimpleNamespace(
        request_id="late", prompt_token_ids=[1, 2, 3], kv_transfer_params=_handoff(time.time() + 4)
    )
    assert side.get_num_new_matched_tokens(late, 0) == (0, False)  # type: ignore[arg-type]
    assert late.kv_transfer_params["do_remote_prefill"] is False
    ok = SimpleNamespace(
        request_id="ok", prompt_token_ids=[1, 2, 3], kv_transfer_params=_handoff(time.time() + 60)
    )
    assert side.get_num_new_matched_tokens(ok, 0) == (3, True)  # type: ignore[arg-type]


def test_a_prefill_hands_off_its_lease_and_nothing_when_aborted() -> None:
    """A finished prefill's hand-off names when its lease ends at the
    latest; an aborted one hands nothing off (vLLM frees its blocks)."""
    import time
    from types import SimpleNamespace

    from vllm.v1.request import RequestStatus

    side = SchedulerSide(
        Settings.parse({"socket": "/s", "address": "h:1", "lease_s": 30}, True), 1, 8
    )
    side._names = ["prefill"]  # what the hosts' Status says
    aborted = SimpleNamespace(
        request_id="a",
        status=RequestStatus.FINISHED_ABORTED,
        kv_transfer_params={"do_remote_decode": True},
    )
    assert side.request_finished(aborted, [1, 2]) == (False, None)  # type: ignore[arg-type]
    assert side.build_connector_meta().sends == []
    before = time.time()
    done = SimpleNamespace(
        request_id="d",
        status=RequestStatus.FINISHED_LENGTH_CAPPED,
        kv_transfer_params={"do_remote_decode": True},
    )
    delay, params = side.request_finished(done, [1, 2])  # type: ignore[arg-type]
    assert delay and params is not None
    assert before + 30 <= params["remote_expires_at"] <= time.time() + 30
    assert [s.request for s in side.build_connector_meta().sends] == ["d"]


def test_a_preempted_decode_is_read_once() -> None:
    """A decode request preempted after its blocks were allocated (and its
    read sent to the workers) is computed when it runs again: vLLM calls
    the scheduler side again, which reads it no more."""
    import time
    from types import SimpleNamespace

    side = SchedulerSide(Settings.parse({"socket": "/s"}, False), 1, 8)
    req = SimpleNamespace(
        request_id="r", prompt_token_ids=[1, 2, 3], kv_transfer_params=_handoff(time.time() + 60)
    )
    blocks = SimpleNamespace(get_unhashed_block_ids=lambda: [0, 1])
    assert side.get_num_new_matched_tokens(req, 0) == (3, True)  # type: ignore[arg-type]
    side.update_state_after_alloc(req, blocks, 3)  # type: ignore[arg-type]
    assert [r.request for r in side.build_connector_meta().recvs] == ["r"]
    # Preempted, then scheduled again.
    assert side.get_num_new_matched_tokens(req, 0) == (0, False)  # type: ignore[arg-type]
    side.update_state_after_alloc(req, blocks, 0)  # type: ignore[arg-type]
    assert side.build_connector_meta().recvs == []
