"""The connector's worker side when engine API calls fail.

These drive custody.vllm.worker.WorkerSide with a scripted client in place
of custody.client.Client: what these tests need — a reply lost after the
host took a call, a host that answers too late, a host restarted between
two calls, a late report of a pin vLLM already had back — cannot be made
to happen at a chosen call with a real host, and the real client's own
behaviour is tested against real hosts in test_client.py. Every decision
is taken at an explicit ``now``, so nothing here depends on timing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from custody.client import BlockRef, Failure, Finished
from custody.errors import DeadlineExceeded, Duplicate, InvalidArgument, Unavailable
from custody.vllm.config import Settings
from custody.vllm.layout import Layout
from custody.vllm.metadata import CustodyMetadata, Recv, Send
from custody.vllm.worker import WorkerSide

IN_FLIGHT = 'read request "p-1" is still in flight; use a new id'
TAKEN = 'core: read request "p-1": request "p-1" is in flight: request already taken (a retry)'


@dataclass
class Status:
    incarnation: int


@dataclass
class ScriptedClient:
    """Answers each call from a script: a list per method of errors to
    raise, in order, before the calls succeed."""

    incarnation: int = 7
    errors: dict[str, list[Exception]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    registered: int = 0

    def _answer(self, name: str) -> None:
        self.calls.append(name)
        script = self.errors.get(name)
        if script:
            raise script.pop(0)

    def status(self, **_: Any) -> Status:
        self._answer("status")
        return Status(self.incarnation)

    def register_pool(self, *_: Any, **__: Any) -> int:
        self._answer("register_pool")
        self.registered += 1
        return 10 + self.registered

    def alloc(self, pool: int, n: int, **_: Any) -> list[int]:
        self._answer("alloc")
        return list(range(n))

    def connect_peer(self, *_: Any, **__: Any) -> None:
        self._answer("connect_peer")

    def read(self, *_: Any, **__: Any) -> None:
        self._answer("read")

    def expect_send(self, *_: Any, **__: Any) -> None:
        self._answer("expect_send")

    def close(self) -> None:
        pass


LAYOUT = Layout(path="/dev/shm/x", block_bytes=4096, num_blocks=8, layers=2)


@pytest.fixture
def worker() -> Callable[[ScriptedClient], WorkerSide]:
    def make(client: ScriptedClient) -> WorkerSide:
        w = WorkerSide(Settings.parse({"socket": "/nonexistent", "lease_s": 5}, False), 0, "t")
        w.client.close()
        w.client = client  # type: ignore[assignment]
        w._attach(LAYOUT)  # what register does, without its watch thread
        w.layout = LAYOUT
        client.calls.clear()
        return w

    return make


def recv(request: str = "d-1") -> Recv:
    return Recv(
        request=request,
        local_blocks=[2, 3],
        remote_request="p-1",
        remote_blocks=[5, 6],
        remote_hosts=["127.0.0.1:1"],
        remote_names=["prefill"],
        remote_pool="kv",
        remote_num_blocks=8,
        token=9,
    )


def test_a_read_whose_reply_was_lost_is_adopted_not_failed(
    worker: Callable[[ScriptedClient], WorkerSide],
) -> None:
    c = ScriptedClient(errors={"read": [Unavailable("Socket closed"), Duplicate(TAKEN)]})
    w = worker(c)
    w._read(recv(), deadline=10.0, now=0.0, retry=False)
    assert w.transfer_results().failed_recving == set(), "a read that may run was failed"
    w._read(recv(), deadline=10.0, now=1.0, retry=True)
    res = w.transfer_results()
    assert (res.failed_recving, res.invalid_blocks) == (set(), set())
    w._reports.put(Finished(finished_recving=["p-1"]))
    assert w.transfer_results().finished_recving == {"d-1"}


def test_a_read_whose_reply_was_lost_and_report_came_first_is_not_retried(
    worker: Callable[[ScriptedClient], WorkerSide],
) -> None:
    c = ScriptedClient(errors={"read": [Unavailable("Socket closed")]})
    w = worker(c)
    w._read(recv(), deadline=10.0, now=0.0, retry=False)
    w._reports.put(Finished(finished_recving=["p-1"]))
    res = w.transfer_results()
    assert (res.finished_recving, res.failed_recving) == ({"d-1"}, set())
    assert w._unread == [], "the report ends the wait for a retry"
    assert c.calls.count("read") == 1


@pytest.mark.parametrize("refusal", [InvalidArgument(IN_FLIGHT), Duplicate(TAKEN)])
def test_a_first_read_refused_as_in_flight_is_a_conflict(
    worker: Callable[[ScriptedClient], WorkerSide], refusal: Exception
) -> None:
    c = ScriptedClient(errors={"read": [refusal]})
    w = worker(c)
    w._read(recv(), deadline=10.0, now=0.0, retry=False)
    res = w.transfer_results()
    assert (res.failed_recving, res.invalid_blocks) == ({"d-1"}, {2, 3})


def test_a_retried_read_another_request_holds_fails(
    worker: Callable[[ScriptedClient], WorkerSide],
) -> None:
    c = ScriptedClient(errors={"read": [Unavailable("Socket closed"), InvalidArgument(IN_FLIGHT)]})
    w = worker(c)
    w._read(recv(), deadline=10.0, now=0.0, retry=False)
    w._read(recv(), deadline=10.0, now=1.0, retry=True)
    res = w.transfer_results()
    assert (res.failed_recving, res.invalid_blocks) == ({"d-1"}, {2, 3}), (
        "another token holds the id: not ours"
    )


def test_a_read_no_host_took_fails_past_its_deadline(
    worker: Callable[[ScriptedClient], WorkerSide],
) -> None:
    gone = "failed to connect to all addresses; last error: Connection refused"
    c = ScriptedClient(errors={"read": [Unavailable(gone), Unavailable(gone)]})
    w = worker(c)
    c.errors["status"] = [Unavailable(gone)] * 2
    w._read(recv(), deadline=1.0, now=0.0, retry=False)
    assert w.transfer_results().failed_recving == set()
    w._read(recv(), deadline=1.0, now=2.0, retry=True)
    res = w.transfer_results()
    assert (res.finished_recving, res.failed_recving, res.invalid_blocks) == (
        {"d-1"},
        {"d-1"},
        {2, 3},
    )


def test_a_read_a_live_host_never_answered_in_time_stays_lent(
    worker: Callable[[ScriptedClient], WorkerSide],
) -> None:
    late = DeadlineExceeded("Deadline Exceeded")
    w = worker(ScriptedClient(errors={"read": [late, late]}))
    w._read(recv(), deadline=1.0, now=0.0, retry=False)
    w._read(recv(), deadline=1.0, now=2.0, retry=True)
    res = w.transfer_results()
    assert (res.finished_recving, res.invalid_blocks) == (set(), set()), (
        "blocks a slow host may write were handed back"
    )
    w._reports.put(
        Finished(
            finished_recving=["p-1"],
            failed=[Failure("p-1", False, "x")],
            invalid_blocks=[BlockRef(w.pool, b) for b in LAYOUT.to_custody([2, 3])],
        )
    )
    res = w.transfer_results()
    assert (res.finished_recving, res.failed_recving, res.invalid_blocks) == (
        {"d-1"},
        {"d-1"},
        {2, 3},
    )


def test_a_restarted_host_gets_the_kv_cache_again_and_the_read(
    worker: Callable[[ScriptedClient], WorkerSide],
) -> None:
    c = ScriptedClient(errors={"read": [InvalidArgument("read: pool 11 is not registered")]})
    w = worker(c)
    c.incarnation = 8  # the host restarted since the KV cache was registered
    w._read(recv(), deadline=10.0, now=0.0, retry=False)
    assert c.calls == [
        "connect_peer",
        "read",
        "status",
        "status",
        "register_pool",
        "alloc",
        "connect_peer",
        "read",
    ]
    assert w.pool == 12 and w.transfer_results().failed_recving == set()


def test_reads_in_flight_when_the_host_restarts_fail_with_their_blocks(
    worker: Callable[[ScriptedClient], WorkerSide],
) -> None:
    c = ScriptedClient()
    w = worker(c)
    w._read(recv(), deadline=10.0, now=0.0, retry=False)
    c.incarnation = 8
    w.start(CustodyMetadata())  # busy, and the last check is long past
    res = w.transfer_results()
    assert (res.finished_recving, res.failed_recving, res.invalid_blocks) == (
        {"d-1"},
        {"d-1"},
        {2, 3},
    )


def test_a_pin_whose_reply_was_lost_is_adopted_on_its_retry(
    worker: Callable[[ScriptedClient], WorkerSide],
) -> None:
    taken = 'core: expect send: request "p-1" is in flight: request already taken (a retry)'
    c = ScriptedClient(errors={"expect_send": [Unavailable("Socket closed"), Duplicate(taken)]})
    w = worker(c)
    s = Send(request="p-1", blocks=[1], token=3)
    now = time.monotonic()
    w._pin(s, deadline=now + 60, now=now)
    w.start(CustodyMetadata())  # the retry, within the lease: the host had it
    assert w._unpinned == [] and "p-1" in w._pinned
    assert w.transfer_results().finished_sending == set()
    w._reports.put(Finished(finished_sending=["p-1"]))
    assert w.transfer_results().finished_sending == {"p-1"}


def test_a_pin_handed_back_at_its_lease_is_not_reported_twice(
    worker: Callable[[ScriptedClient], WorkerSide],
) -> None:
    c = ScriptedClient(errors={"expect_send": [Unavailable("Socket closed")]})
    w = worker(c)
    s = Send(request="p-1", blocks=[1], token=3)
    w._pin(s, deadline=1.0, now=0.0)
    assert w.transfer_results().finished_sending == set()
    w.start(CustodyMetadata())  # the retry, past the lease: vLLM gets it back
    assert w.transfer_results().finished_sending == {"p-1"}
    w._reports.put(Finished(finished_sending=["p-1"]))  # the first call had got through
    assert w.transfer_results().finished_sending == set(), "vLLM would see p-1 finish twice"


def test_a_round_with_quarantined_blocks_waits_one_step(
    worker: Callable[[ScriptedClient], WorkerSide],
) -> None:
    w = worker(ScriptedClient())
    w._read(recv(), deadline=10.0, now=0.0, retry=False)
    bad = LAYOUT.to_custody([3])[1]
    w._reports.put(
        Finished(
            finished_recving=["p-1"],
            failed=[Failure("p-1", False, "x")],
            invalid_blocks=[BlockRef(w.pool, LAYOUT.to_custody([2])[0])],
            quarantined=[BlockRef(w.pool, bad)],
        )
    )
    first = w.transfer_results()
    meta = w.worker_meta()
    assert first.finished_recving == set() and meta is not None and meta.quarantined == {3}
    second = w.transfer_results()
    assert (second.finished_recving, second.failed_recving) == ({"d-1"}, {"d-1"})
    assert w.worker_meta() is None


def test_a_prefill_of_another_tp_size_is_refused_by_name(
    worker: Callable[[ScriptedClient], WorkerSide],
) -> None:
    c = ScriptedClient()
    w = worker(c)
    r = recv()
    r.remote_hosts, r.remote_names = ["a:1", "b:1"], ["p0", "p1"]
    w._read(r, deadline=10.0, now=0.0, retry=False)
    assert "read" not in c.calls
    res = w.transfer_results()
    assert (res.failed_recving, res.invalid_blocks) == ({"d-1"}, {2, 3})
