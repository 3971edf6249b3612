"""Fixtures that run real ``custody serve`` hosts for the Python tests.

``custody_bin``
    the custody binary: ``$CUSTODY_BIN/custody`` (CUSTODY_BIN is the
    directory ``make build`` fills, as for the Go tests), by default the
    repository's ``bin/custody``.
``custody_pair``
    a :class:`Pair`: a prefill and a decode host with the fake transport in
    a fresh directory, each with a registered pool ``kv`` and a client,
    decode connected to prefill and prefill to decode (as internal/cluster/pair.go).
    Both are stopped, and every file they made removed, at teardown.
``socket_proxy``
    a factory of :class:`SocketProxy`, a byte-for-byte forwarder in front
    of an engine socket whose connections a test can break.

:class:`Host` and :func:`start_pair` are usable without pytest too
(python/bench/pull.py runs them).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from custody.client import Client, RemoteRank
from custody.hosts import HostProcess

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The repository's root, found from this file's place in it."""

START_TIMEOUT = 30.0
"""Seconds a host has to answer its engine API once started."""

STOP_TIMEOUT = 30.0
"""Seconds a host has to exit after SIGTERM before it is killed."""


def custody_binary() -> Path:
    """The custody binary: ``$CUSTODY_BIN/custody``, else the repository's
    ``bin/custody``."""
    return Path(os.environ.get("CUSTODY_BIN") or REPO_ROOT / "bin") / "custody"


@dataclass
class Host(HostProcess):
    """A :class:`custody.hosts.HostProcess` with the fake transport and a
    pool: its files in ``dir`` (config, log, engine socket, and pool file
    ``<name>.kv`` of ``blocks`` blocks of ``block_size`` bytes), the pool
    registered as ``kv`` (id ``pool``) through ``client`` once it runs. Its
    socket and metadata endpoint (``address``) stay the same across
    restarts."""

    blocks: int = 64
    block_size: int = 16 << 10
    client: Client | None = None
    pool: int = 0

    @property
    def pool_path(self) -> Path:
        """The host's pool file."""
        return Path(self.dir) / f"{self.name}.kv"

    @property
    def api(self) -> Client:
        """The host's client (the host must have been started)."""
        assert self.client is not None, f"host {self.name} was not started"
        return self.client

    def start(self, timeout_s: float = START_TIMEOUT, *, register: bool = True) -> Host:
        """Starts the host and waits until its engine API answers; with
        register, registers its pool (made on the first start, kept after)."""
        os.makedirs(self.dir, exist_ok=True)
        if not self.pool_path.exists():
            with open(self.pool_path, "wb") as f:
                f.truncate(self.blocks * self.block_size)
        super().start(timeout_s)
        if self.client is None:
            self.client = Client(self.socket)
        if register:
            self.pool = self.api.register_pool(
                "kv", self.pool_path, 0, self.block_size, self.blocks, timeout=10
            )
        return self

    def close(self) -> int | None:
        """Stops the host and closes its client."""
        code = self.stop(STOP_TIMEOUT)
        if self.client is not None:
            self.client.close()
            self.client = None
        return code

    def write_blocks(self, blocks: list[int], data: list[bytes]) -> None:
        """Writes data[i] into block blocks[i] of the pool file."""
        with open(self.pool_path, "r+b") as f:
            for b, d in zip(blocks, data, strict=True):
                f.seek(b * self.block_size)
                f.write(d)

    def read_blocks(self, blocks: list[int]) -> list[bytes]:
        """The bytes of each of blocks of the pool file."""
        with open(self.pool_path, "rb") as f:
            out = []
            for b in blocks:
                f.seek(b * self.block_size)
                out.append(f.read(self.block_size))
            return out


@dataclass
class Pair:
    """A prefill and a decode host, each connected to the other as peer
    ``prefill`` / ``decode`` (pool ``kv``)."""

    prefill: Host
    decode: Host
    dir: Path

    def connect(self, host: Host) -> None:
        """Connects host to the other one (ConnectPeer with its metadata
        address and pool kv), as internal/cluster/pair.go."""
        other = self.prefill if host is self.decode else self.decode
        host.api.connect_peer(other.name, [RemoteRank(other.address, "kv")], timeout=10)

    def stop(self) -> None:
        """Stops both hosts and closes their clients."""
        for h in (self.decode, self.prefill):
            h.close()


def start_pair(
    binary: Path,
    dir: Path,
    *,
    blocks: int = 64,
    block_size: int = 16 << 10,
    params: dict[str, str] | None = None,
) -> Pair:
    """Starts a prefill and a decode host in dir (the fake's params besides
    its dir: params) and connects them both ways; stops what it started when
    it fails."""
    hosts = [
        Host(
            n,
            str(dir),
            str(binary),
            params=dict(params or {}),
            blocks=blocks,
            block_size=block_size,
        )
        for n in ("prefill", "decode")
    ]
    pair = Pair(hosts[0], hosts[1], dir)
    try:
        for h in hosts:
            h.start()
        pair.connect(pair.decode)
        pair.connect(pair.prefill)
    except BaseException:
        pair.stop()
        raise
    return pair


@pytest.fixture(scope="session")
def custody_bin() -> Path:
    """The custody binary ($CUSTODY_BIN/custody, else the repository's
    bin/custody); fails when it is not built."""
    b = custody_binary()
    if not os.access(b, os.X_OK):
        pytest.fail(f"{b} is not an executable: run make build (or set CUSTODY_BIN)")
    return b


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A fresh directory for hosts' files, removed at teardown. Short, under
    /tmp, so that unix socket paths stay within their 108 bytes."""
    d = Path(tempfile.mkdtemp(prefix="custody-py-", dir="/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def custody_pair(custody_bin: Path, host_dir: Path) -> Iterator[Pair]:
    """A running prefill+decode pair of hosts with the fake transport (see
    :class:`Pair`), stopped at teardown."""
    pair = start_pair(custody_bin, host_dir)
    try:
        yield pair
    finally:
        pair.stop()


class SocketProxy:
    """Listens on a unix socket and forwards each connection, byte for byte,
    to ``target``; ``break_connections()`` shuts every forwarded connection
    down (the client sees its connection drop), new ones still get through.
    """

    def __init__(self, path: Path, target: Path) -> None:
        self.path = path
        self.target = target
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen(16)
        self._mu = threading.Lock()
        self._conns: list[socket.socket] = []  # forwarded, not broken yet
        self._all: list[socket.socket] = []  # every one, closed at close()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self.accepted = 0
        self._spawn(self._accept)

    def _spawn(self, fn: Callable[..., None], *args: object) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True)
        with self._mu:
            self._threads.append(t)
        t.start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self._listener.accept()
            except OSError:
                return
            try:
                u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                u.connect(str(self.target))
            except OSError:
                c.close()
                continue
            with self._mu:
                if self._closed:
                    c.close()
                    u.close()
                    return
                self._conns += [c, u]
                self._all += [c, u]
                self.accepted += 1
            self._spawn(self._pump, c, u)
            self._spawn(self._pump, u, c)

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def break_connections(self) -> None:
        """Shuts down every connection forwarded so far."""
        with self._mu:
            conns, self._conns = self._conns, []
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Stops listening, breaks every connection and waits for the
        forwarding threads to end."""
        with self._mu:
            self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self.break_connections()
        with self._mu:
            threads = list(self._threads)
        for t in threads:
            t.join(10)
        with self._mu:
            conns = self._all
        for s in conns:
            s.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


@pytest.fixture
def socket_proxy(host_dir: Path) -> Iterator[Callable[[Path], SocketProxy]]:
    """A factory: socket_proxy(target) starts a SocketProxy in front of the
    engine socket target; every proxy it made is closed at teardown."""
    made: list[SocketProxy] = []

    def make(target: Path) -> SocketProxy:
        p = SocketProxy(host_dir / f"proxy{len(made)}.sock", target)
        made.append(p)
        return p

    try:
        yield make
    finally:
        for p in made:
            p.close()
