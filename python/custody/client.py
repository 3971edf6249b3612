"""The Python client of custody's engine API (api/engine/v1/engine.proto).

A :class:`Client` is a connection to one custody host over its engine unix
socket. Its calls are the Engine service's, in snake_case; each raises the
:mod:`custody.errors` subclass of the host's status code when it fails.
Finished reports come with acknowledged delivery from
:meth:`Client.watch_finished`, an iterator that yields every report once and
in order.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
import grpc.experimental

from custody.api.engine.v1 import engine_pb2, engine_pb2_grpc
from custody.errors import (
    Canceled,
    CustodyError,
    HostRestarted,
    Unavailable,
    Watching,
    error_from_rpc,
)

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "DEFAULT_ACK_DELAY",
    "MAX_ACK_DELAY",
    "MAX_REPLY",
    "MIN_REPLY",
    "BlockRef",
    "Client",
    "Failure",
    "Finished",
    "Part",
    "RemoteRank",
    "Watch",
    "new_token",
]

DEFAULT_ACK_DELAY = 0.05
"""Seconds a watch waits, after a report was processed, before it
acknowledges it (``Client(ack_delay=...)``). Each acknowledgement is a gRPC
call, about 0.2 ms of the engine process's CPU in grpc-python: at this
delay at most 20 a second. What the delay costs is only this: an engine
process that starts after this one ended gets up to the delay's worth of
reports this one had processed (this client's own next watch resumes at its
cursor, which acknowledges them)."""

MAX_ACK_DELAY = 1.0
"""The largest ack delay a Client accepts, in seconds: the host keeps each
report until it is acknowledged."""

MIN_REPLY = 16 << 10
"""The least ``max_reply`` a Client accepts, in bytes: the host's least batch."""

MAX_REPLY = (1 << 31) - 1
"""The largest ``max_reply`` a Client accepts, in bytes."""

# The HTTP/2 flow-control window of the client's side, as Go's DialOptions
# set it: 1 MiB holds a whole batch of reports. Go's fixed window also turns
# gRPC's bandwidth-delay estimator off (a ping after each burst of data);
# grpc-python has no connection window option, so the stream lookahead is
# set and the estimator turned off explicitly.
_WINDOW = 1 << 20
_CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.http2.lookahead_bytes", _WINDOW),
    ("grpc.http2.bdp_probe", 0),
    # The host is a local socket: reconnect within tens of milliseconds
    # once it is back (gRPC's default waits a second and more), since a call
    # while the channel waits to reconnect fails at once with UNAVAILABLE.
    ("grpc.initial_reconnect_backoff_ms", 20),
    ("grpc.min_reconnect_backoff_ms", 20),
    ("grpc.max_reconnect_backoff_ms", 500),
    # A watch's StreamFinished is read by the thread that iterates it, with
    # no channel thread between them (see _Stream).
    (grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1),
)

# A watch reopens a stream that failed with UNAVAILABLE after a backoff that
# doubles from _BACKOFF_MIN to at most _BACKOFF_MAX seconds.
_BACKOFF_MIN = 0.01
_BACKOFF_MAX = 0.5
# How often a watch given a stop event looks at it while it waits for the
# host's next report (threading.Event cannot be waited on with another).
_STOP_POLL = 0.05
# How long a watch waits for a stream's acknowledger to end once the stream
# is closed, and the deadline of each acknowledgement.
_JOIN_TIMEOUT = 5.0

_UINT64 = (1 << 64) - 1

_R = TypeVar("_R")


@dataclass(slots=True)
class Part:
    """One transfer of a Read or Write: ``local`` blocks of local pool
    ``pool`` to or from as many ``remote`` blocks of the peer's rank ``rank``
    (its index in the peer's ``connect_peer`` ranks)."""

    pool: int
    local: Sequence[int]
    rank: int = 0
    remote: Sequence[int] = ()


@dataclass(frozen=True, slots=True)
class RemoteRank:
    """One rank of a peer: its host's metadata address (or the name of a peer
    in the host's config) and the name of its pool that remote block ids
    index."""

    address: str
    pool: str


@dataclass(frozen=True, slots=True)
class Failure:
    """A failed request: its id, whether it was this side's sending (not its
    receiving) and the host's reason."""

    request: str
    sending: bool
    reason: str


@dataclass(frozen=True, slots=True)
class BlockRef:
    """A block of a pool."""

    pool: int
    block: int


@dataclass(slots=True)
class Finished:
    """A finished report (vLLM's get_finished). Every request appears in
    exactly one report over the host's life. A failed receive is in
    ``finished_recving`` and ``failed``, its blocks in ``invalid_blocks``;
    ``quarantined`` blocks are never handed back and must never be used
    again. Every block of a request listed here is the engine's again.

    ``more`` (``get_finished`` only): the reply ended inside a round too large
    for one reply; the round's rest, a failed receive's invalid blocks among
    it, comes with the next call. A report from ``watch_finished`` is always
    a whole round, with ``more`` False.
    """

    finished_sending: list[str] = field(default_factory=list)
    finished_recving: list[str] = field(default_factory=list)
    failed: list[Failure] = field(default_factory=list)
    invalid_blocks: list[BlockRef] = field(default_factory=list)
    quarantined: list[BlockRef] = field(default_factory=list)
    more: bool = False

    def empty(self) -> bool:
        """Whether the report lists nothing."""
        return not (
            self.finished_sending
            or self.finished_recving
            or self.failed
            or self.invalid_blocks
            or self.quarantined
        )


def new_token() -> int:
    """A request's notification token: 64 random bits, never zero. Draw one
    per request and pass it, with the request id, to both sides
    (``expect_send`` and ``read``, or ``expect_receive`` and ``write``):
    notifications count only for the registration with their token, so a
    late one of an earlier request under the same id counts for nothing."""
    while True:
        t = secrets.randbits(64)
        if t != 0:
            return t


def _lease_ms(lease_s: float) -> int:
    """lease_s as the API's lease_ms: rounded to whole nanoseconds (a Go
    time.Duration), then truncated to whole milliseconds, as the Go client's
    ``uint64(lease.Milliseconds())``."""
    if isinstance(lease_s, bool) or not isinstance(lease_s, (int, float)):
        raise TypeError(f"lease_s {lease_s!r}: want a number of seconds")
    if not math.isfinite(lease_s) or lease_s < 0:
        raise ValueError(f"lease_s {lease_s!r}: want a finite number of seconds, at least 0")
    ms = round(lease_s * 1_000_000_000) // 1_000_000
    if ms > _UINT64:
        raise ValueError(f"lease_s {lease_s!r}: more milliseconds than a uint64 holds")
    return int(ms)


def _finished(r: engine_pb2.Finished) -> Finished:
    return Finished(
        finished_sending=list(r.finished_sending),
        finished_recving=list(r.finished_recving),
        failed=[Failure(x.request_id, x.sending, x.reason) for x in r.failed],
        invalid_blocks=[BlockRef(b.pool, b.block) for b in r.invalid_blocks],
        quarantined=[BlockRef(b.pool, b.block) for b in r.quarantined],
        more=r.more,
    )


def _parts(parts: Sequence[Part]) -> list[engine_pb2.Part]:
    return [
        engine_pb2.Part(pool=p.pool, local=list(p.local), rank=p.rank, remote=list(p.remote))
        for p in parts
    ]


class Client:
    """A connection to one custody host's engine socket; safe to use from
    several threads at once. The connection is made lazily: the first call
    reports a host that is not there (Unavailable).

    ``max_reply`` bounds the replies the client accepts, in bytes (gRPC's
    receive limit; None keeps gRPC's 4 MiB), and ``watch_finished`` asks the
    host for batches that fit: from MIN_REPLY to MAX_REPLY. ``ack_delay`` is
    how long, in seconds (0 to MAX_ACK_DELAY), a watch waits after a report
    was processed before it acknowledges it, so that one acknowledgement
    covers every report processed meanwhile; 0 acknowledges each at once.
    Nothing is lost either way: the client's next watch opens at its cursor,
    which acknowledges everything processed; only another client (a new
    engine process) gets what was processed but not yet acknowledged.

    Every call takes an optional ``timeout`` in seconds (None: no deadline)
    and raises a :class:`custody.errors.CustodyError` subclass when it fails.
    """

    def __init__(
        self,
        socket_path: str | os.PathLike[str],
        *,
        max_reply: int | None = None,
        ack_delay: float = DEFAULT_ACK_DELAY,
    ) -> None:
        path = os.fspath(socket_path)
        if not isinstance(path, str) or path == "":
            raise ValueError(f"engine socket {socket_path!r}: want the path of a unix socket")
        if (
            isinstance(ack_delay, bool)
            or not isinstance(ack_delay, (int, float))
            or not 0 <= ack_delay <= MAX_ACK_DELAY
        ):
            raise ValueError(
                f"engine socket {path}: ack_delay {ack_delay!r}: want 0 to {MAX_ACK_DELAY} seconds"
            )
        options: list[tuple[str, int]] = list(_CHANNEL_OPTIONS)
        if max_reply is not None:
            if (
                isinstance(max_reply, bool)
                or not isinstance(max_reply, int)
                or not MIN_REPLY <= max_reply <= MAX_REPLY
            ):
                raise ValueError(
                    f"engine socket {path}: max_reply {max_reply!r} bytes: "
                    f"want {MIN_REPLY} to {MAX_REPLY}"
                )
            options.append(("grpc.max_receive_message_length", max_reply))
        self._socket = path
        self._max_reply = max_reply or 0
        self._ack_delay = float(ack_delay)
        self._channel = grpc.insecure_channel("unix:" + path, options=options)
        self._stub: Any = engine_pb2_grpc.EngineStub(self._channel)  # type: ignore[no-untyped-call]
        self._closed = False
        # The watch's state: every report below cursor, of the host process
        # incarnation (0 while the client has none), was processed; watching
        # is whether a Watch is open.
        self._lock = threading.Lock()
        self._cursor = 0
        self._incarnation = 0
        self._watching = False

    @property
    def socket_path(self) -> str:
        """The engine socket the client connects to."""
        return self._socket

    @property
    def watch_position(self) -> tuple[int, int]:
        """(cursor, incarnation): every report of host process incarnation
        below cursor was processed by a watch of this client, and the next
        watch opens there; (0, 0) before the first report, and again once a
        watch found that the host restarted."""
        with self._lock:
            return self._cursor, self._incarnation

    def close(self) -> None:
        """Closes the connection; calls made after (or still running) fail
        with Canceled. Closing twice is harmless."""
        self._closed = True
        self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _call(self, method: Callable[..., _R], request: Any, timeout: float | None) -> _R:
        if self._closed:
            raise Canceled(f"engine socket {self._socket}: the client is closed")
        try:
            return method(request, timeout=timeout)
        except grpc.RpcError as e:
            raise error_from_rpc(e) from e
        except ValueError as e:
            if self._closed:  # grpc: "Cannot invoke RPC on closed channel!"
                raise Canceled(f"engine socket {self._socket}: the client is closed") from e
            raise

    def register_pool(
        self,
        name: str,
        path: str | os.PathLike[str],
        offset: int,
        block_size: int,
        blocks: int,
        *,
        timeout: float | None = None,
    ) -> int:
        """Registers pool ``name``: ``blocks`` blocks of ``block_size`` bytes
        from byte ``offset`` of the region file at ``path``, which the engine
        created and maps. Returns the pool's id, which the other calls name
        it by."""
        r = self._call(
            self._stub.RegisterPool,
            engine_pb2.RegisterPoolRequest(
                name=name, path=os.fspath(path), offset=offset, block_size=block_size, blocks=blocks
            ),
            timeout,
        )
        return int(r.pool)

    def alloc(self, pool: int, n: int, *, timeout: float | None = None) -> list[int]:
        """Takes ``n`` free blocks of ``pool``; they are the engine's until it
        lends them to a transfer or frees them."""
        r = self._call(self._stub.Alloc, engine_pb2.AllocRequest(pool=pool, count=n), timeout)
        return list(r.blocks)

    def free(self, pool: int, blocks: Sequence[int], *, timeout: float | None = None) -> None:
        """Gives the engine's ``blocks`` of ``pool`` back to the pool."""
        self._call(self._stub.Free, engine_pb2.FreeRequest(pool=pool, blocks=list(blocks)), timeout)

    def connect_peer(
        self, name: str, ranks: Sequence[RemoteRank], *, timeout: float | None = None
    ) -> None:
        """Tells the host how to reach peer ``name``'s ranks; a Part's
        ``rank`` is an index into ``ranks``."""
        self._call(
            self._stub.ConnectPeer,
            engine_pb2.ConnectPeerRequest(
                name=name,
                ranks=[engine_pb2.RemoteRank(address=r.address, pool=r.pool) for r in ranks],
            ),
            timeout,
        )

    def remove_peer(self, name: str, *, timeout: float | None = None) -> None:
        """Retires peer ``name``."""
        self._call(self._stub.RemovePeer, engine_pb2.RemovePeerRequest(name=name), timeout)

    def read(
        self,
        request: str,
        token: int,
        peer: str,
        notify_producer: bool,
        parts: Sequence[Part],
        *,
        timeout: float | None = None,
    ) -> None:
        """Pulls request ``request``'s blocks from ``peer``, one transfer per
        part; the local blocks are lent to custody until a finished report
        lists the request (in ``finished_recving``). With ``notify_producer``
        each rank read from is told, with ``token`` (the one its
        ``expect_send`` was given), once every part is done. A request for
        a peer not connected yet waits for its handshake; one whose
        handshake failed is reported failed, its blocks invalid. Raises
        Unavailable when the host cannot take it now (it stops, its
        transport restarts): retry."""
        self._call(
            self._stub.Read,
            engine_pb2.ReadRequest(
                request_id=request,
                token=token,
                peer=peer,
                parts=_parts(parts),
                notify_producer=notify_producer,
            ),
            timeout,
        )

    def write(
        self,
        request: str,
        token: int,
        peer: str,
        consumers: int,
        lease_s: float,
        parts: Sequence[Part],
        *,
        timeout: float | None = None,
    ) -> None:
        """Pushes request ``request``'s blocks to ``peer``; it finishes once
        ``consumers`` consumed notifications with ``token`` (the one the
        consumer's ``expect_receive`` was given) arrived or the lease of
        ``lease_s`` seconds expired. The lease travels in whole milliseconds,
        truncated as the Go client does."""
        self._call(
            self._stub.Write,
            engine_pb2.WriteRequest(
                request_id=request,
                token=token,
                peer=peer,
                parts=_parts(parts),
                consumers=consumers,
                lease_ms=_lease_ms(lease_s),
            ),
            timeout,
        )

    def expect_send(
        self,
        request: str,
        token: int,
        peer: str,
        pool: int,
        blocks: Sequence[int],
        consumers: int,
        lease_s: float,
        *,
        timeout: float | None = None,
    ) -> None:
        """Pins ``blocks`` of ``pool`` that consumers will read, until
        ``consumers`` consumed notifications with ``token`` arrived or the
        lease of ``lease_s`` seconds (whole milliseconds, truncated) expired;
        the request is then reported in ``finished_sending``. ``peer`` may be
        empty: any peer may read them."""
        self._call(
            self._stub.ExpectSend,
            engine_pb2.ExpectSendRequest(
                request_id=request,
                token=token,
                peer=peer,
                pool=pool,
                blocks=list(blocks),
                consumers=consumers,
                lease_ms=_lease_ms(lease_s),
            ),
            timeout,
        )

    def expect_receive(
        self,
        request: str,
        token: int,
        peer: str,
        pool: int,
        blocks: Sequence[int],
        producers: int,
        lease_s: float,
        *,
        timeout: float | None = None,
    ) -> None:
        """Pins ``blocks`` of ``pool`` that a peer will push into, until
        ``producers`` written notifications with ``token`` arrived (the
        receive finishes) or the lease of ``lease_s`` seconds (whole
        milliseconds, truncated) expired (the blocks come back invalid).
        It needs the peer connected: Unavailable while its handshake runs
        (retry), HandshakeFailed once an attempt of it failed, until one
        succeeds (the host retries it; retry at the engine's pace)."""
        self._call(
            self._stub.ExpectReceive,
            engine_pb2.ExpectReceiveRequest(
                request_id=request,
                token=token,
                peer=peer,
                pool=pool,
                blocks=list(blocks),
                producers=producers,
                lease_ms=_lease_ms(lease_s),
            ),
            timeout,
        )

    def get_finished(self, *, timeout: float | None = None) -> Finished:
        """Takes what finished since the last call; the host forgets it as it
        answers, so a reply that is lost is lost (``watch_finished`` is the
        acknowledged way). ``more`` is set when a round too large for one
        reply goes on in the next call."""
        r = self._call(self._stub.GetFinished, engine_pb2.GetFinishedRequest(), timeout)
        return _finished(r)

    def status(self, *, timeout: float | None = None) -> engine_pb2.StatusResponse:
        """The host's status."""
        r: engine_pb2.StatusResponse = self._call(
            self._stub.Status, engine_pb2.StatusRequest(), timeout
        )
        return r

    def watch_finished(self, *, stop: threading.Event | None = None) -> Watch:
        """Every finished report of the host, each exactly once and in order,
        as soon as the host has it: an iterator (a :class:`Watch`) that ends
        when ``stop`` is set or it is closed.

        Each report is one round of the host, whole: a round the host split
        to fit a reply is merged again. A report counts as processed once the
        consumer asks for the next one (``next()``), or calls
        ``Watch.processed()``; a report the consumer received but did not get
        that far with (it raised, broke out of the loop, closed the watch) is
        not processed, and the client's next watch yields it again. The
        client keeps the cursor of the last processed report and the host
        process it came from, so its next watch resumes after it, and
        acknowledges processed reports within ``ack_delay``, after which the
        host forgets them.

        When the stream breaks (Unavailable: the host stopped, the connection
        broke) the watch opens another at its cursor, after a backoff of
        0.01 s doubling to at most 0.5 s, for as long as it runs: nothing is
        lost and nothing comes twice. When the host restarted since, it
        refuses that cursor (HostRestarted): the watch forgets it and starts
        again from the new host process's first report, so none of the new
        host's reports is skipped. Any other failure is raised from
        ``next()`` as a CustodyError (a host that broke the stream's order or
        incarnation: DATA_LOSS, naming the numbers) and ends the watch.

        Raises Watching while another watch of this client is open. The
        watch ends, its stream cancelled and no thread of it left, within
        about 0.05 s of ``stop`` being set, at once when closed.
        """
        with self._lock:
            if self._watching:
                raise Watching("a watch_finished of this client is open; one at a time")
            self._watching = True
        return Watch(self, stop)

    # The Watch's access to the client's watch state.

    def _position(self) -> tuple[int, int]:
        with self._lock:
            return self._cursor, self._incarnation

    def _set_position(self, cursor: int, incarnation: int) -> None:
        with self._lock:
            self._cursor, self._incarnation = cursor, incarnation

    def _watch_ended(self) -> None:
        with self._lock:
            self._watching = False


class _Acker:
    """One StreamFinished stream's acknowledgements, each an AckFinished call
    from a thread of the acker's own: after a report is processed it waits
    the ack delay, then acknowledges the newest processed cursor. It also
    cancels the stream once the watch's stop event is set. An
    acknowledgement that fails cancels the stream too, and its error is kept
    for the watch to act on (the reader's next() sees only the cancel)."""

    def __init__(self, stub: Any, call: Any, delay: float, stop: threading.Event | None) -> None:
        self._ack = stub.AckFinished
        self._call = call
        self._delay = delay
        self._stop = stop
        self._cond = threading.Condition()
        self._cursor = 0
        self._inc = 0
        self._due: float | None = None  # when to acknowledge _cursor; None: nothing due
        self._ended = False
        self.error: grpc.RpcError | None = None  # the acknowledgement that failed
        self.acked = 0  # the cursor last acknowledged (under _cond, notified)
        self._thread = threading.Thread(target=self._run, name="custody-watch-acks", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                req = self._wait()
            if req is None:
                return
            try:
                self._ack(req, timeout=_JOIN_TIMEOUT)
            except grpc.RpcError as e:
                with self._cond:
                    self.error, self._ended = e, True
                self._call.cancel()
                return
            with self._cond:
                self.acked = req.cursor
                self._cond.notify_all()

    def _wait(self) -> engine_pb2.AckFinishedRequest | None:
        """The next acknowledgement once it is due; None once ended (and the
        stream cancelled, when it ended for the stop event)."""
        while True:
            if self._ended:
                return None
            if self._stop is not None and self._stop.is_set():
                self._ended = True
                self._call.cancel()
                return None
            now = time.monotonic()
            if self._due is not None and self._due <= now:
                self._due = None
                return engine_pb2.AckFinishedRequest(cursor=self._cursor, incarnation=self._inc)
            wait = None if self._due is None else self._due - now
            if self._stop is not None:
                wait = _STOP_POLL if wait is None else min(wait, _STOP_POLL)
            self._cond.wait(wait)

    def wait_acked(self, cursor: int, timeout: float) -> bool:
        """Whether cursor was acknowledged within timeout seconds."""
        with self._cond:
            return self._cond.wait_for(lambda: self.acked >= cursor, timeout)

    def processed(self, cursor: int, inc: int) -> None:
        """Records that everything below cursor, of host process inc, was
        processed: it is acknowledged within the delay."""
        with self._cond:
            self._cursor, self._inc = cursor, inc
            if self._due is None:
                self._due = time.monotonic() + self._delay
                self._cond.notify_all()

    def end(self) -> None:
        """Ends the acknowledgements and waits for the thread (an
        acknowledgement under way, for at most its deadline); what was not
        acknowledged yet is left to the next stream's opening cursor."""
        with self._cond:
            self._ended = True
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(_JOIN_TIMEOUT)


class _Stream:
    """One StreamFinished stream, opened at the client's cursor, and its
    acknowledger. The stream only receives: with the channel's
    single-threaded option, gRPC reads it in the thread that iterates it,
    with no thread of its own."""

    def __init__(self, client: Client, stop: threading.Event | None) -> None:
        self.cursor, self.inc = client._position()
        self.next = self.cursor  # where the next batch must start
        first = engine_pb2.WatchFinishedRequest(
            cursor=self.cursor, incarnation=self.inc, max_batch_bytes=client._max_reply
        )
        try:
            self.call: Any = client._stub.StreamFinished(first)
        except ValueError as e:  # a closed channel
            raise Canceled(f"engine socket {client.socket_path}: the client is closed") from e
        self.acks = _Acker(client._stub, self.call, client._ack_delay, stop)

    def round(self) -> tuple[Finished, int]:
        """The stream's next whole round and the cursor after it. Raises
        grpc.RpcError when the stream fails, Unavailable when it ends."""
        rnd = Finished()
        while True:
            try:
                b = next(self.call)
            except StopIteration:
                raise Unavailable("watch finished: the host ended the stream") from None
            # Every batch of a stream is of one host process: the one the
            # cursor came from, or, opened at 0, the first batch's (0 from a
            # host older than incarnations, which refuses no cursor).
            if self.inc == 0:
                self.inc = b.incarnation
            if b.incarnation != self.inc:
                raise CustodyError(
                    grpc.StatusCode.DATA_LOSS,
                    f"watch finished: the host sent reports of incarnation {b.incarnation:#x} "
                    f"on a stream of incarnation {self.inc:#x}; reconnect",
                )
            # A batch starts where the last ended; it may start later when
            # reports were acknowledged by another reader (get_finished),
            # never earlier: an earlier start would yield a report twice.
            if (
                b.cursor < self.next
                or b.next <= b.cursor
                or (b.cursor != self.next and not rnd.empty())
            ):
                raise CustodyError(
                    grpc.StatusCode.DATA_LOSS,
                    f"watch finished: the host sent reports [{b.cursor}, {b.next}) "
                    f"where {self.next} was expected; reconnect",
                )
            self.next = b.next
            f = _finished(b)
            rnd.finished_sending.extend(f.finished_sending)
            rnd.finished_recving.extend(f.finished_recving)
            rnd.failed.extend(f.failed)
            rnd.invalid_blocks.extend(f.invalid_blocks)
            rnd.quarantined.extend(f.quarantined)
            if not b.more:
                return rnd, self.next

    def close(self) -> None:
        """Cancels the stream and ends its acknowledger. Called by the one
        thread that iterates the stream, or with none iterating it."""
        self.call.cancel()
        self.acks.end()
        # gRPC frees a single-threaded call once the thread that iterates it
        # has consumed its every event; after a cancel, next() raises without
        # consuming what is left, and grpc-python has no public way to, so
        # each cancelled stream would keep about 20 KiB. Consume it here.
        consume = getattr(self.call, "_consume_next_event", None)
        state = getattr(self.call, "_state", None)
        while consume is not None and state is not None and state.due:
            consume()


class Watch(Iterator[Finished]):
    """An open ``Client.watch_finished``: iterate it for the host's finished
    reports, from one thread at a time. It holds the client's one watch until
    it ends: when it is closed (``close()``, from any thread; its ``with``
    block; its last reference dropped), when its stop event is set, or when
    ``next()`` raised. Once ended it yields nothing more."""

    def __init__(self, client: Client, stop: threading.Event | None) -> None:
        self._client = client
        self._stop = stop
        self._mu = threading.Condition()
        self._stream: _Stream | None = None
        # The report last yielded and not yet processed: its next cursor
        # and incarnation.
        self._pending: tuple[int, int] | None = None
        self._closing = threading.Event()  # close() was called
        self._busy = False  # a next() runs
        self._done = False  # torn down: the client's watch is free

    def __iter__(self) -> Watch:
        return self

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # nothing to tell at collection
            self.close()

    def processed(self) -> None:
        """Marks the report last yielded processed now, as the next
        ``next()`` would: the client's next watch resumes after it, and it
        is acknowledged within the ack delay. Nothing when there is none."""
        with self._mu:
            self._mark()

    def _mark(self) -> None:
        if self._pending is None:
            return
        cursor, inc = self._pending
        self._pending = None
        self._client._set_position(cursor, inc)
        if self._stream is not None:
            self._stream.acks.processed(cursor, inc)

    def _stopped(self) -> bool:
        return self._closing.is_set() or (self._stop is not None and self._stop.is_set())

    def __next__(self) -> Finished:
        with self._mu:
            if self._done:
                raise StopIteration
            if self._busy:
                raise RuntimeError("watch finished: next() runs in another thread")
            self._busy = True
            self._mark()
        try:
            return self._receive()
        except BaseException:
            self._teardown()
            raise
        finally:
            with self._mu:
                self._busy = False
                self._mu.notify_all()

    def _receive(self) -> Finished:
        backoff = _BACKOFF_MIN
        while True:
            with self._mu:
                if self._stopped():
                    raise StopIteration
                if self._stream is None:
                    self._stream = _Stream(self._client, self._stop)
                stream = self._stream
            try:
                rnd, nxt = stream.round()
            except (grpc.RpcError, Unavailable) as e:
                self._end_stream()
                if self._stopped():
                    raise StopIteration from None
                # An acknowledgement that failed cancelled the stream: act
                # on its error, not on the cancel.
                cause: grpc.RpcError | Unavailable = stream.acks.error or e
                err = error_from_rpc(cause) if isinstance(cause, grpc.RpcError) else cause
                if isinstance(err, HostRestarted):
                    # The host refused a cursor of an earlier host process:
                    # forget it. The next stream opens at 0, which no host
                    # refuses as another's.
                    self._client._set_position(0, 0)
                    if stream.cursor != 0:
                        continue
                if isinstance(err, Unavailable):
                    self._pause(backoff)
                    backoff = min(2 * backoff, _BACKOFF_MAX)
                    continue
                if self._client._closed and isinstance(err, Canceled):
                    raise Canceled(
                        f"engine socket {self._client.socket_path}: the client is closed"
                    ) from e
                raise err from e
            with self._mu:
                self._pending = (nxt, stream.inc)
            return rnd

    def _pause(self, seconds: float) -> None:
        """Waits seconds, or less once the watch is stopped or closed."""
        deadline = time.monotonic() + seconds
        while not self._stopped():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self._stop is None:
                self._closing.wait(left)
            else:
                self._stop.wait(min(left, _STOP_POLL))

    def _end_stream(self) -> None:
        with self._mu:
            s, self._stream = self._stream, None
        if s is not None:
            s.close()

    def _teardown(self) -> None:
        with self._mu:
            if self._done:
                return
            self._done = True
        try:
            self._end_stream()
        finally:
            self._client._watch_ended()

    def close(self) -> None:
        """Ends the watch and returns once it ended: its stream cancelled,
        its thread done, the client free for another watch. A next() running
        in another thread stops with StopIteration. A report yielded and not
        yet processed (see ``processed``) is yielded again by the client's
        next watch."""
        with self._mu:
            if self._done:
                return
            self._closing.set()
            if self._busy:
                if self._stream is not None:
                    self._stream.call.cancel()
                while self._busy:
                    self._mu.wait()
                return
        self._teardown()
