"""Tests of custody.client against real ``custody serve`` hosts (fake
transport): every call, its typed errors, and watch_finished's delivery
(once, in order, whole rounds) across abandoned watches, broken streams and
host restarts. Waits are on events (a report, a process exit, a thread's
end) with deadlines; nothing sleeps to let something happen."""

from __future__ import annotations

import math
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import grpc
import pytest
from conftest import Host, Pair, SocketProxy

import custody
import custody.client as client_mod
from custody import (
    Backend,
    BlockRef,
    Busy,
    Canceled,
    Client,
    CustodyError,
    DeadlineExceeded,
    Duplicate,
    Finished,
    HandshakeFailed,
    HostRestarted,
    InvalidArgument,
    NotFound,
    Part,
    RemoteRank,
    ResourceExhausted,
    Unavailable,
    UnknownOutcome,
    Unsupported,
    Watch,
    Watching,
    error_from_rpc,
    new_token,
)
from custody.client import _lease_ms

WAIT = 30.0
"""Seconds a test waits for an event before it fails."""


# Helpers.


def retry_unavailable(fn: Callable[[], None]) -> None:
    """Calls fn until it does not raise Unavailable (a peer's handshake runs),
    within WAIT seconds."""
    deadline = time.monotonic() + WAIT
    while True:
        try:
            fn()
            return
        except Unavailable:
            if time.monotonic() > deadline:
                raise
        # Pace the retries while the handshake runs (as internal/bench/engines.go does).
        threading.Event().wait(0.001)


def start_pull(pair: Pair, request: str, src: list[int], dst: list[int]) -> None:
    """A pull of request: expect_send of prefill's src blocks (any peer, one
    consumer), then a read of them into decode's dst blocks with
    notify_producer."""
    p, d = pair.prefill, pair.decode
    token = new_token()
    p.api.expect_send(request, token, "", p.pool, src, 1, 60.0, timeout=10)
    retry_unavailable(
        lambda: d.api.read(request, token, "prefill", True, [Part(d.pool, dst, 0, src)], timeout=10)
    )


def ids(reports: Iterable[Finished], kind: str) -> list[str]:
    """Every request id the reports list under kind (a Finished field)."""
    out: list[str] = []
    for f in reports:
        out += getattr(f, kind)
    return out


class Collector:
    """A watch_finished of client run in a thread: each report goes to a
    queue as it comes, and the thread asks for the next at once, so each
    report is processed once queued. ``wait`` takes reports until the ones
    wanted came."""

    def __init__(self, client: Client) -> None:
        self.stop = threading.Event()
        self.watch = client.watch_finished(stop=self.stop)
        self.q: queue.Queue[Finished | BaseException | None] = queue.Queue()
        self.seen: list[Finished] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for f in self.watch:
                self.q.put(f)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            self.q.put(e)
        self.q.put(None)

    def wait(self, kind: str, *want: str) -> list[Finished]:
        """Takes reports until every id of want was listed under kind;
        returns the reports taken."""
        missing = set(want)
        got: list[Finished] = []
        deadline = time.monotonic() + WAIT
        while missing:
            left = deadline - time.monotonic()
            try:
                f = self.q.get(timeout=max(left, 0))
            except queue.Empty:
                pytest.fail(f"no report of {sorted(missing)} ({kind}) within {WAIT} s")
            if f is None:
                pytest.fail(f"the watch ended before reporting {sorted(missing)}")
            if isinstance(f, BaseException):
                raise f
            got.append(f)
            self.seen.append(f)
            missing -= set(getattr(f, kind))
        return got

    def close(self) -> None:
        """Stops the watch and waits for its thread."""
        self.stop.set()
        self.thread.join(WAIT)
        assert not self.thread.is_alive(), "the watch did not end once stopped"


@pytest.fixture
def collectors() -> Iterator[Callable[[Client], Collector]]:
    """A factory of Collectors, each closed at teardown."""
    made: list[Collector] = []

    def make(c: Client) -> Collector:
        col = Collector(c)
        made.append(col)
        return col

    yield make
    for col in made:
        col.close()


def next_within(w: Watch, stop: threading.Event) -> Finished:
    """next(w), with stop set past WAIT seconds so that a missing report
    fails the test instead of hanging it."""
    t = threading.Timer(WAIT, stop.set)
    t.start()
    try:
        return next(w)
    except StopIteration:
        pytest.fail(f"no report within {WAIT} s")
    finally:
        t.cancel()
        t.join()


def watch_threads() -> set[threading.Thread]:
    """The threads running now."""
    return set(threading.enumerate())


# Pulls and pushes, bytes verified.


def test_pull_16k_bytes_verified(
    custody_pair: Pair, collectors: Callable[[Client], Collector]
) -> None:
    p, d = custody_pair.prefill, custody_pair.decode
    assert p.block_size == 16 << 10
    src, dst = p.api.alloc(p.pool, 1), d.api.alloc(d.pool, 1)
    data = [os.urandom(p.block_size)]
    p.write_blocks(src, data)
    assert d.read_blocks(dst) != data
    sent, recv = collectors(p.api), collectors(d.api)

    start_pull(custody_pair, "pull-16k", src, dst)

    got = recv.wait("finished_recving", "pull-16k")
    assert ids(got, "failed") == []
    assert d.read_blocks(dst) == data
    assert ids(sent.wait("finished_sending", "pull-16k"), "failed") == []
    # The blocks are the engines' again.
    p.api.free(p.pool, src)
    d.api.free(d.pool, dst)
    # The position is of this host process.
    assert d.api.watch_position[1] == d.api.status().incarnation


def test_a_retried_read_after_its_report_is_duplicate(
    custody_pair: Pair, collectors: Callable[[Client], Collector]
) -> None:
    """The retry of a read whose reply was lost, after the read was
    reported, is refused Duplicate and writes nothing into the blocks the
    engine uses by then."""
    p, d = custody_pair.prefill, custody_pair.decode
    src, dst = p.api.alloc(p.pool, 1), d.api.alloc(d.pool, 1)
    data = [os.urandom(p.block_size)]
    p.write_blocks(src, data)
    recv = collectors(d.api)
    token = new_token()
    p.api.expect_send("retried", token, "", p.pool, src, 1, 60.0, timeout=10)
    part = [Part(d.pool, dst, 0, src)]
    retry_unavailable(lambda: d.api.read("retried", token, "prefill", True, part, timeout=10))
    assert ids(recv.wait("finished_recving", "retried"), "failed") == []
    p.write_blocks(src, [os.urandom(p.block_size)])  # the prefill reuses its block
    with pytest.raises(Duplicate):
        d.api.read("retried", token, "prefill", True, part, timeout=10)
    assert d.read_blocks(dst) == data


def test_push_bytes_verified(custody_pair: Pair, collectors: Callable[[Client], Collector]) -> None:
    p, d = custody_pair.prefill, custody_pair.decode
    src, dst = p.api.alloc(p.pool, 2), d.api.alloc(d.pool, 2)
    data = [os.urandom(p.block_size) for _ in src]
    p.write_blocks(src, data)
    sent, recv = collectors(p.api), collectors(d.api)
    token = new_token()
    retry_unavailable(lambda: d.api.expect_receive("push", token, "prefill", d.pool, dst, 1, 60.0))
    retry_unavailable(
        lambda: p.api.write("push", token, "decode", 1, 60.0, [Part(p.pool, src, 0, dst)])
    )
    assert ids(sent.wait("finished_sending", "push"), "failed") == []
    assert ids(recv.wait("finished_recving", "push"), "failed") == []
    assert d.read_blocks(dst) == data


# The other calls.


def test_status_peers_and_alloc_free(custody_pair: Pair) -> None:
    d = custody_pair.decode
    st = d.api.status(timeout=5)
    assert st.name == "decode"
    assert st.transport == "fake"
    assert st.incarnation != 0
    blocks = d.api.alloc(d.pool, 3)
    assert len(set(blocks)) == 3
    assert all(0 <= b < d.blocks for b in blocks)
    d.api.free(d.pool, blocks)
    assert d.api.alloc(d.pool, 0) == []
    # status().peers lists a peer once its handshake ended, which
    # connect_peer does not wait for; remove_peer knows it at once.
    d.api.remove_peer("prefill")
    assert "prefill" not in d.api.status().peers
    with pytest.raises(InvalidArgument, match="not connected"):
        d.api.remove_peer("prefill")
    custody_pair.connect(d)
    d.api.remove_peer("prefill")
    custody_pair.connect(d)


def test_get_finished(custody_pair: Pair) -> None:
    d = custody_pair.decode
    p = custody_pair.prefill
    src, dst = p.api.alloc(p.pool, 2), d.api.alloc(d.pool, 2)
    assert d.api.get_finished() == Finished()
    start_pull(custody_pair, "gf-1", src[:1], dst[:1])
    # A watch shows the report is there; closed before it is processed, it
    # leaves it to get_finished.
    stop = threading.Event()
    with d.api.watch_finished(stop=stop) as w:
        assert "gf-1" in next_within(w, stop).finished_recving
    f = d.api.get_finished(timeout=5)
    assert f.finished_recving == ["gf-1"]
    assert not f.more
    assert d.api.get_finished() == Finished()
    # get_finished acknowledged it: a watch from cursor 0 starts after it.
    start_pull(custody_pair, "gf-2", src[1:], dst[1:])
    with d.api.watch_finished(stop=stop) as w:
        f = next_within(w, stop)
    assert f.finished_recving == ["gf-2"]


# Errors, as the host really answers them.


def test_handshake_failed_names_the_peer_and_the_cause(
    custody_bin: Path, host_dir: Path, collectors: Callable[[Client], Collector]
) -> None:
    """A peer whose handshake cannot succeed (its files lie outside the
    decode transport's peer_dirs): once the first attempt failed, the
    engine hears its cause, not "in progress"."""
    elsewhere = host_dir / "elsewhere"
    elsewhere.mkdir()
    prefill = Host("prefill", str(host_dir), str(custody_bin)).start()
    decode = Host("decode", str(host_dir), str(custody_bin), params={"peer_dirs": str(elsewhere)})
    try:
        decode.start()
        recv = collectors(decode.api)
        decode.api.connect_peer("prefill", [RemoteRank(prefill.address, "kv")], timeout=10)
        blocks = decode.api.alloc(decode.pool, 2)
        # The attempt's end is the event: a read waits for it and is
        # reported failed with its error (the host records the failure
        # first), or is refused with it when the attempt failed first.
        try:
            decode.api.read(
                "r", new_token(), "prefill", False, [Part(decode.pool, blocks[1:], 0, [0])]
            )
        except HandshakeFailed:
            pass
        else:
            assert [f.request for f in ids(recv.wait("finished_recving", "r"), "failed")] == ["r"]
        with pytest.raises(HandshakeFailed) as got:
            decode.api.expect_receive(
                "w", new_token(), "prefill", decode.pool, blocks[:1], 1, 60.0, timeout=10
            )
        e = got.value
        assert e.reason == custody.REASON_HANDSHAKE_FAILED
        assert 'peer "prefill": handshake failed' in e.message
        assert "lies outside the directories this agent may open for peers" in e.message
        assert not isinstance(e, Busy)
        decode.api.free(decode.pool, blocks)  # refused calls took nothing
    finally:
        decode.close()
        prefill.close()


def test_invalid_argument_from_host(custody_pair: Pair, host_dir: Path) -> None:
    p = custody_pair.prefill
    c = p.api
    cases: list[tuple[str, Callable[[], object]]] = [
        ("no such pool", lambda: c.alloc(99, 1)),
        ("64 are free", lambda: c.alloc(p.pool, p.blocks + 1)),
        ("block_size 0 out of range", lambda: c.register_pool("x", p.pool_path, 0, 0, 1)),
        ("no such file", lambda: c.register_pool("x", host_dir / "absent", 0, 16, 1)),
        ("a pool of that name exists", lambda: c.register_pool("kv", p.pool_path, 0, 16, 1)),
        ("beyond the file", lambda: c.register_pool("y", p.pool_path, 0, p.block_size, 99)),
        ("held by free, not the engine", lambda: c.free(p.pool, [0])),
        ("not connected", lambda: c.remove_peer("nobody")),
        ("call ConnectPeer first", lambda: c.read("r", 1, "nobody", True, [Part(p.pool, [0])])),
        # 0.4 ms is 0 ms, as the Go client truncates it; the host refuses 0.
        ("lease_ms 0 out of range", lambda: c.expect_send("r", 1, "", p.pool, [0], 1, 0.0004)),
        ("consumers 0 out of range", lambda: c.expect_send("r", 1, "", p.pool, [0], 0, 1.0)),
    ]
    for want, call in cases:
        with pytest.raises(InvalidArgument) as ei:
            call()
        assert want in ei.value.message
        assert ei.value.code is grpc.StatusCode.INVALID_ARGUMENT
        assert isinstance(ei.value, CustodyError)
        assert str(ei.value) == "INVALID_ARGUMENT: " + ei.value.message
    # A refused call changed nothing: every block is still free.
    blocks = c.alloc(p.pool, p.blocks)
    c.free(p.pool, blocks)


def test_transport_errors_from_host(custody_pair: Pair, host_dir: Path) -> None:
    p = custody_pair.prefill
    # No host at the socket.
    with Client(host_dir / "absent.sock") as c, pytest.raises(Unavailable) as ei:
        c.status(timeout=5)
    assert ei.value.code is grpc.StatusCode.UNAVAILABLE
    # A deadline that passed: the host is stopped (SIGSTOP), so nothing
    # answers on its socket.
    assert p.proc is not None
    p.api.status()
    p.proc.send_signal(signal.SIGSTOP)
    # The stop takes effect asynchronously (a running thread may still
    # answer): wait until the kernel reports the host stopped.
    _, st = os.waitpid(p.proc.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(st)
    try:
        with pytest.raises(DeadlineExceeded):
            p.api.status(timeout=0.2)
    finally:
        p.proc.send_signal(signal.SIGCONT)
    p.api.status(timeout=10)
    # A closed client.
    c = Client(p.socket)
    c.status()
    c.close()
    with pytest.raises(Canceled):
        c.status()
    w = c.watch_finished()
    with pytest.raises(Canceled):
        next(w)
    c.watch_finished().close()  # the failed watch ended
    # A reply larger than max_reply: 20000 block ids of a pool of 1-byte
    # blocks take more than 16 KiB.
    small = host_dir / "small.kv"
    with open(small, "wb") as f:
        f.truncate(20000)
    pool = p.api.register_pool("small", small, 0, 1, 20000)
    with Client(p.socket, max_reply=16384) as c, pytest.raises(ResourceExhausted):
        c.alloc(pool, 20000)


class _RpcError(grpc.RpcError):
    """A gRPC error with a status, as grpc raises them (grpc.Call's code,
    details and trailing metadata)."""

    def __init__(
        self, code: grpc.StatusCode, details: str, trailing: tuple[tuple[str, bytes], ...] = ()
    ) -> None:
        self._code, self._details, self._trailing = code, details, trailing

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
        return self._trailing


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (grpc.StatusCode.UNAVAILABLE, Unavailable),
        (grpc.StatusCode.INVALID_ARGUMENT, InvalidArgument),
        (grpc.StatusCode.DEADLINE_EXCEEDED, DeadlineExceeded),
        (grpc.StatusCode.CANCELLED, Canceled),
        (grpc.StatusCode.INTERNAL, Backend),
        (grpc.StatusCode.UNKNOWN, UnknownOutcome),
        (grpc.StatusCode.FAILED_PRECONDITION, Busy),
        (grpc.StatusCode.NOT_FOUND, NotFound),
        (grpc.StatusCode.UNIMPLEMENTED, Unsupported),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, ResourceExhausted),
        (grpc.StatusCode.ABORTED, HostRestarted),
        (grpc.StatusCode.ALREADY_EXISTS, Duplicate),
        (grpc.StatusCode.DATA_LOSS, CustodyError),
        (grpc.StatusCode.PERMISSION_DENIED, CustodyError),
        (grpc.StatusCode.OUT_OF_RANGE, CustodyError),
    ],
)
def test_error_from_rpc_maps_every_code(code: grpc.StatusCode, cls: type[CustodyError]) -> None:
    e = error_from_rpc(_RpcError(code, "what was wrong"))
    assert type(e) is cls
    assert e.code is code
    assert e.message == "what was wrong"
    assert str(e) == f"{code.name}: what was wrong"
    if cls is not CustodyError:
        assert cls("m").code is code  # a subclass fixes its code
        assert cls.__doc__ and code.name in cls.__doc__


def test_error_from_rpc_reads_the_error_info_reason() -> None:
    """The host's ErrorInfo (google.rpc.Status details, encoded here with
    googleapis-common-protos) tells HandshakeFailed from Busy."""
    status_pb2 = pytest.importorskip("google.rpc.status_pb2")
    error_details_pb2 = pytest.importorskip("google.rpc.error_details_pb2")

    def rpc_error(domain: str, reason: str) -> _RpcError:
        st = status_pb2.Status(code=9, message="m")
        info = error_details_pb2.ErrorInfo(domain=domain, reason=reason, metadata={"peer": "p"})
        st.details.add().Pack(info)
        md = (("other-bin", b"\x00"), ("grpc-status-details-bin", st.SerializeToString()))
        return _RpcError(grpc.StatusCode.FAILED_PRECONDITION, 'peer "p": handshake failed: x', md)

    e = error_from_rpc(rpc_error(custody.ERROR_DOMAIN, custody.REASON_HANDSHAKE_FAILED))
    assert type(e) is HandshakeFailed
    assert e.code is grpc.StatusCode.FAILED_PRECONDITION
    assert e.reason == "HANDSHAKE_FAILED"
    assert not isinstance(e, Busy)
    assert HandshakeFailed("m").reason == "HANDSHAKE_FAILED"
    e = error_from_rpc(rpc_error("another.domain", custody.REASON_HANDSHAKE_FAILED))
    assert type(e) is Busy
    assert e.reason == ""
    e = error_from_rpc(rpc_error(custody.ERROR_DOMAIN, "SOMETHING_ELSE"))
    assert type(e) is Busy
    assert e.reason == "SOMETHING_ELSE"
    garbled = (("grpc-status-details-bin", b"\x1a\xff\x01"),)
    e = error_from_rpc(_RpcError(grpc.StatusCode.FAILED_PRECONDITION, "m", garbled))
    assert type(e) is Busy


def test_error_from_rpc_without_status() -> None:
    e = error_from_rpc(grpc.RpcError())
    assert isinstance(e, UnknownOutcome)
    assert e.message == ""


# Arguments refused before anything is sent.


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"ack_delay": -0.001}, "ack_delay -0.001"),
        ({"ack_delay": 1.5}, "ack_delay 1.5"),
        ({"ack_delay": math.nan}, "ack_delay nan"),
        ({"ack_delay": True}, "ack_delay True"),
        ({"max_reply": 0}, "max_reply 0"),
        ({"max_reply": 16383}, "max_reply 16383"),
        ({"max_reply": 1 << 31}, "max_reply 2147483648"),
        ({"max_reply": 1.5e6}, "max_reply 1500000.0"),
        ({"max_reply": True}, "max_reply True"),
    ],
)
def test_client_rejects_bad_arguments(kwargs: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        Client("/tmp/custody-none.sock", **kwargs)  # type: ignore[arg-type]


def test_client_accepts_bounds(tmp_path: Path) -> None:
    for kw in ({"max_reply": 16384, "ack_delay": 0}, {"max_reply": (1 << 31) - 1, "ack_delay": 1}):
        Client(tmp_path / "s", **kw).close()  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="engine socket ''"):
        Client("")


def test_lease_truncated_to_ms_as_go() -> None:
    assert _lease_ms(60) == 60000
    assert _lease_ms(1.001) == 1001  # 1.000999... s is 1001 ms as a Go Duration
    assert _lease_ms(0.0019) == 1
    assert _lease_ms(0.0004) == 0
    assert _lease_ms(0) == 0
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="lease_s"):
            _lease_ms(bad)


def test_new_token() -> None:
    tokens = {new_token() for _ in range(1000)}
    assert len(tokens) == 1000
    assert all(0 < t < 1 << 64 for t in tokens)
    assert any(t >= 1 << 63 for t in tokens)  # all 64 bits are drawn


def test_public_names() -> None:
    for name in custody.__all__:
        obj = getattr(custody, name)
        if callable(obj):
            assert obj.__doc__, f"custody.{name} has no docstring"


# watch_finished.


def test_watch_merges_a_split_round(custody_bin: Path, host_dir: Path) -> None:
    """A failed receive of 3000 blocks is one round of more than 16 KiB:
    the host splits it for a 16 KiB client, the watch yields it whole."""
    n = 3000
    p = Host("prefill", host_dir, custody_bin, blocks=4096, block_size=64)
    d = Host(
        "decode",
        host_dir,
        custody_bin,
        blocks=4096,
        block_size=64,
        params={"fault": "post-fail,post=1"},
    )
    pair = Pair(p, d, host_dir)
    try:
        p.start()
        d.start()
        pair.connect(d)
        src, dst = p.api.alloc(p.pool, n), d.api.alloc(d.pool, n)
        start_pull(pair, "big", src, dst)
        stop = threading.Event()
        with Client(d.socket, max_reply=16384) as c, c.watch_finished(stop=stop) as w:
            f = next_within(w, stop)
        assert f.finished_recving == ["big"]
        assert [x.request for x in f.failed] == ["big"]
        assert not f.failed[0].sending
        assert "injected fault" in f.failed[0].reason
        assert sorted(f.invalid_blocks, key=lambda b: b.block) == [
            BlockRef(d.pool, b) for b in sorted(dst)
        ]
        assert not f.more
    finally:
        pair.stop()


def test_watch_redelivers_an_unprocessed_report(custody_pair: Pair) -> None:
    p, d = custody_pair.prefill, custody_pair.decode
    src, dst = p.api.alloc(p.pool, 4), d.api.alloc(d.pool, 4)
    stop = threading.Event()
    start_pull(custody_pair, "re-1", src[:1], dst[:1])
    w = d.api.watch_finished(stop=stop)
    assert next_within(w, stop).finished_recving == ["re-1"]
    w.close()  # abandoned: re-1 was not processed
    assert d.api.watch_position == (0, 0)

    w = d.api.watch_finished(stop=stop)
    assert next_within(w, stop).finished_recving == ["re-1"]  # again
    start_pull(custody_pair, "re-2", src[1:2], dst[1:2])
    # Asking for the next processes re-1; re-2 alone comes.
    assert next_within(w, stop).finished_recving == ["re-2"]
    inc = d.api.status().incarnation
    assert d.api.watch_position[1] == inc
    del w  # dropped unprocessed: the watch ends with its last reference

    start_pull(custody_pair, "re-3", src[2:3], dst[2:3])
    w = d.api.watch_finished(stop=stop)
    got = [next_within(w, stop)]
    while "re-3" not in ids(got, "finished_recving"):
        got.append(next_within(w, stop))
    assert ids(got, "finished_recving") == ["re-2", "re-3"]
    w.processed()  # re-3 is processed without asking for the next
    w.close()
    assert d.api.watch_position[1] == inc
    start_pull(custody_pair, "re-4", src[3:], dst[3:])
    with d.api.watch_finished(stop=stop) as w:
        assert next_within(w, stop).finished_recving == ["re-4"]


def test_watch_acknowledges_what_it_processed(custody_pair: Pair) -> None:
    p, d = custody_pair.prefill, custody_pair.decode
    src, dst = p.api.alloc(p.pool, 2), d.api.alloc(d.pool, 2)
    stop = threading.Event()
    with Client(d.socket, ack_delay=0) as a:
        start_pull(custody_pair, "ack-1", src[:1], dst[:1])
        w = a.watch_finished(stop=stop)
        assert next_within(w, stop).finished_recving == ["ack-1"]
        w.processed()
        stream = w._stream
        assert stream is not None
        cursor = a.watch_position[0]
        assert stream.acks.wait_acked(cursor, WAIT), "ack-1 was not acknowledged"
        # The host forgot ack-1: another client's first report is ack-2.
        start_pull(custody_pair, "ack-2", src[1:], dst[1:])
        with Client(d.socket) as b, b.watch_finished(stop=stop) as wb:
            assert next_within(wb, stop).finished_recving == ["ack-2"]
        w.close()


def test_a_closed_watch_leaves_no_call_behind(
    custody_pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cancelled stream is freed by gRPC only once its every event was
    # consumed (see _Stream.close): each way a watch ends leaves none due.
    streams: list[client_mod._Stream] = []
    close = client_mod._Stream.close

    def recording(self: client_mod._Stream) -> None:
        streams.append(self)
        close(self)

    monkeypatch.setattr(client_mod._Stream, "close", recording)
    p, d = custody_pair.prefill, custody_pair.decode
    src, dst = p.api.alloc(p.pool, 2), d.api.alloc(d.pool, 2)
    for i, how in enumerate(("stop", "close")):
        stop = threading.Event()
        w = d.api.watch_finished(stop=stop)
        # A report first, so the stream is open and the next() below waits
        # on it.
        start_pull(custody_pair, f"left-{how}", src[i : i + 1], dst[i : i + 1])
        assert next_within(w, stop).finished_recving == [f"left-{how}"]
        t = threading.Thread(target=lambda w=w: list(w))
        t.start()
        if how == "stop":
            stop.set()
        else:
            w.close()
        t.join(WAIT)
        assert not t.is_alive(), how
        w.close()
    assert len(streams) == 2
    for s in streams:
        assert not s.call._state.due, f"a closed stream still waits for {s.call._state.due}"


def test_second_watch_raises_watching(custody_pair: Pair) -> None:
    c = custody_pair.decode.api
    w = c.watch_finished()
    with pytest.raises(Watching):
        c.watch_finished()
    # Another client of the same host may watch.
    with Client(c.socket_path) as other:
        other.watch_finished().close()
    w.close()
    w.close()  # closing twice is harmless
    assert list(w) == []  # a closed watch yields nothing
    c.watch_finished().close()


def test_watch_ends_promptly_on_stop_and_close(custody_pair: Pair) -> None:
    p, d = custody_pair.prefill, custody_pair.decode
    src, dst = p.api.alloc(p.pool, 2), d.api.alloc(d.pool, 2)
    c = d.api
    c.status()  # gRPC's own threads start with the first call
    before = watch_threads()
    for i, how in enumerate(("stop", "close")):
        stop = threading.Event()
        w = c.watch_finished(stop=stop)
        # A report first, so the stream is open: the next() below waits on
        # the host for one that never comes.
        start_pull(custody_pair, how, src[i : i + 1], dst[i : i + 1])
        assert next_within(w, stop).finished_recving == [how]
        ended = threading.Event()
        result: list[object] = []

        def run(
            w: Watch = w, ended: threading.Event = ended, result: list[object] = result
        ) -> None:
            try:
                result.append(next(w))
            except BaseException as e:  # noqa: BLE001 - checked below
                result.append(e)
            ended.set()

        t = threading.Thread(target=run)
        t.start()
        t0 = time.monotonic()
        if how == "stop":
            stop.set()
        else:
            w.close()
        assert ended.wait(5), f"next() did not return after {how}"
        took = time.monotonic() - t0
        t.join(5)
        assert took < 1.0, f"next() took {took:.3f} s to end after {how}"
        assert len(result) == 1
        assert isinstance(result[0], StopIteration)
        w.close()
        # The stream has no gRPC thread (the iterating thread reads it) and
        # the watch's acknowledger was joined as it ended: any thread
        # started since, joined here, must end at once.
        for extra in watch_threads() - before:
            extra.join(1.0)
            assert not extra.is_alive(), f"a thread of the watch outlived it: {extra}"
        # The report was processed (next() was called): it does not come again.
        assert c.watch_position[0] > 0
    with c.watch_finished() as w:
        pass  # the client's watch is free again


def test_watch_fails_canceled_when_its_client_closes(custody_pair: Pair) -> None:
    c = Client(custody_pair.decode.socket)
    c.status()
    w = c.watch_finished()
    result: list[BaseException] = []

    def run() -> None:
        try:
            next(w)
        except BaseException as e:  # noqa: BLE001 - checked below
            result.append(e)

    t = threading.Thread(target=run)
    t.start()
    c.close()
    t.join(5)
    assert not t.is_alive(), "next() did not return once the client closed"
    assert len(result) == 1
    assert isinstance(result[0], Canceled), repr(result[0])
    assert list(w) == []


def test_watch_reopens_a_broken_stream_at_its_cursor(
    custody_pair: Pair,
    socket_proxy: Callable[[Path], SocketProxy],
    collectors: Callable[[Client], Collector],
) -> None:
    p, d = custody_pair.prefill, custody_pair.decode
    src, dst = p.api.alloc(p.pool, 3), d.api.alloc(d.pool, 3)
    proxy = socket_proxy(d.socket)
    # A long ack delay: re-1 is still unacknowledged on the host when the
    # stream breaks, so only the reopened stream's cursor keeps it from
    # coming again.
    with Client(proxy.path, ack_delay=1.0) as c:
        col = collectors(c)
        start_pull(custody_pair, "br-1", src[:1], dst[:1])
        col.wait("finished_recving", "br-1")
        inc = d.api.status().incarnation
        accepted = proxy.accepted
        proxy.break_connections()
        start_pull(custody_pair, "br-2", src[1:2], dst[1:2])
        col.wait("finished_recving", "br-2")
        assert proxy.accepted > accepted, "the watch did not reconnect"
        proxy.break_connections()
        start_pull(custody_pair, "br-3", src[2:], dst[2:])
        col.wait("finished_recving", "br-3")
        col.close()
        assert ids(col.seen, "finished_recving") == ["br-1", "br-2", "br-3"]
        assert c.watch_position[1] == inc


def test_watch_across_a_host_restart(
    custody_pair: Pair, collectors: Callable[[Client], Collector]
) -> None:
    p, d = custody_pair.prefill, custody_pair.decode
    src = p.api.alloc(p.pool, 5)
    c = d.api
    col = collectors(c)
    dst = c.alloc(d.pool, 1)
    start_pull(custody_pair, "rs-1", src[:1], dst)
    col.wait("finished_recving", "rs-1")
    old_inc = c.status().incarnation

    # Restarted while the watch runs: it reopens on the new host, from the
    # new host's first report.
    d.stop()
    d.start()
    assert d.api is c
    new_inc = c.status().incarnation
    assert new_inc != old_inc
    custody_pair.connect(d)
    dst = c.alloc(d.pool, 2)
    start_pull(custody_pair, "rs-2", src[1:2], dst[:1])
    start_pull(custody_pair, "rs-3", src[2:3], dst[1:])
    col.wait("finished_recving", "rs-2", "rs-3")
    col.close()
    assert ids(col.seen, "finished_recving") == ["rs-1", "rs-2", "rs-3"]
    assert c.watch_position[1] == new_inc

    # Restarted while no watch runs, with reports waiting: the next watch
    # opens at its old cursor, is refused, and starts again from 0.
    d.stop()
    d.start()
    newer_inc = c.status().incarnation
    custody_pair.connect(d)
    dst = c.alloc(d.pool, 2)
    start_pull(custody_pair, "rs-4", src[3:4], dst[:1])
    start_pull(custody_pair, "rs-5", src[4:], dst[1:])
    assert c.watch_position[1] == new_inc
    col = collectors(c)
    got = col.wait("finished_recving", "rs-4", "rs-5")
    # Nothing of the new host skipped, nothing of the old one again.
    assert ids(got, "finished_recving") == ["rs-4", "rs-5"]
    assert got == col.seen
    col.close()
    cursor, inc = c.watch_position
    assert inc == newer_inc
    assert cursor >= 2
