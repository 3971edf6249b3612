"""The connector's worker side: one custody host per TP rank.

At registration the whole KV cache becomes one custody pool
(:mod:`custody.vllm.layout`) and every block of it is taken by the engine
(Alloc): custody holds a block only while a transfer or a pin has it, and
gives it back through a finished report.

Reports come from the host's StreamFinished stream, read by one thread into
a queue; every vLLM step takes what arrived (:meth:`WorkerSide.transfer_results`).
custody reports a request only once every transfer of it is terminal or
fenced, so a block vLLM gets back is one no transfer can still touch. A
failed read's blocks come back as invalid in the same report and reach vLLM
in the same step as the request (``get_block_ids_with_load_errors``).
Blocks custody cannot prove safe are quarantined: it never gives them
back. The worker tells the scheduler side about them one step before it
reports their request, so the scheduler pins them first (:mod:`custody.vllm.scheduler`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import torch

from custody.client import Client, Finished, Part, RemoteRank
from custody.errors import (
    CustodyError,
    DeadlineExceeded,
    Duplicate,
    InvalidArgument,
    Unavailable,
    UnknownOutcome,
)
from custody.vllm.config import Settings
from custody.vllm.layout import Layout, Regions, describe, shm_allocation
from custody.vllm.metadata import CustodyMetadata, CustodyWorkerMetadata, Recv, Send

log = logging.getLogger("custody.vllm")

# How often, at most, a busy worker asks whether its host restarted.
_CHECK_S = 1.0


def _host_gone(e: CustodyError) -> bool:
    """Whether gRPC found no host process on the socket (nothing listens:
    the host exited, and its transport dies with it)."""
    return isinstance(e, Unavailable) and (
        "failed to connect to all addresses" in e.message or "Connection refused" in e.message
    )


@dataclass
class Results:
    """One step's outcome for vLLM."""

    finished_sending: set[str] = field(default_factory=set)
    finished_recving: set[str] = field(default_factory=set)
    failed_recving: set[str] = field(default_factory=set)
    invalid_blocks: set[int] = field(default_factory=set)


class WorkerSide:
    """Worker-side state of CustodyConnector (one per TP rank)."""

    def __init__(self, settings: Settings, rank: int, name: str, tp_size: int = 1) -> None:
        self.settings = settings
        self.rank = rank
        self.tp_size = tp_size
        self.client = Client(settings.socket_of(rank))
        self.regions = Regions(settings.shm_dir, f"{name}-{rank}")
        self.layout: Layout | None = None
        self.pool = 0
        self._reports: queue.Queue[Finished] = queue.Queue()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._peers: set[str] = set()
        # custody request id (the prefill's) -> vLLM's request id and blocks.
        self._reading: dict[str, tuple[str, list[int]]] = {}
        # sends ExpectSend refused (a host restarting), retried each step
        # until their lease; sends pinned, until reported; sends pinned on
        # a host that restarted since, held until their lease.
        self._unpinned: list[tuple[Send, float]] = []
        # reads the host could not take (Unavailable: it restarts, or the
        # connection broke), retried each step until their deadline.
        self._unread: list[tuple[Recv, float]] = []
        self._pinned: dict[str, float] = {}
        self._orphaned: dict[str, float] = {}
        # sends handed back at their lease without a report of the host,
        # whose report, should one come, vLLM must not see twice.
        self._handed_back: set[str] = set()
        # The host process the KV cache is registered with (Status's
        # incarnation), and when that was last checked.
        self._incarnation = 0
        self._checked = 0.0
        # results held one step behind the quarantine they carry.
        self._held: Results | None = None
        self._quarantined: set[int] = set()
        self._load_errors: set[int] = set()

    def mem_pool_context(self) -> AbstractContextManager[None]:
        """The KV cache's allocation context: shared memory (after removing
        what killed engine processes left there)."""
        for path in self.regions.sweep():
            log.warning(
                "custody.vllm: rank %d: removed %s, the KV cache of an engine process that is gone",
                self.rank,
                path,
            )
        return shm_allocation(self.regions)

    def register(self, kv_caches: dict[str, torch.Tensor]) -> None:
        """Register the KV cache as one pool on the host and take every
        block of it for the engine."""
        layout = describe(kv_caches, self.regions)
        self._attach(layout)
        self.layout = layout
        self._watcher = threading.Thread(target=self._watch, name="custody-watch", daemon=True)
        self._watcher.start()
        log.info(
            "custody.vllm: rank %d: KV cache %s registered as pool %d: %d layers x %d blocks of %d bytes",
            self.rank,
            layout.path,
            self.pool,
            layout.layers,
            layout.num_blocks,
            layout.block_bytes,
        )

    def _attach(self, layout: Layout) -> None:
        """Register the KV cache with the host process that runs now."""
        t = self.settings.peer_timeout_s
        incarnation = self.client.status(timeout=t).incarnation
        try:
            pool = self.client.register_pool(
                self.settings.pool,
                layout.path,
                0,
                layout.block_bytes,
                layout.custody_blocks,
                timeout=t,
            )
        except InvalidArgument as e:
            raise RuntimeError(
                f"custody.vllm: rank {self.rank}: registering the KV cache failed: {e}; a host serves one "
                "engine process: restart it with its engine"
            ) from e
        got = self.client.alloc(pool, layout.custody_blocks, timeout=t)
        if sorted(got) != list(range(layout.custody_blocks)):
            raise RuntimeError(
                f"custody.vllm: the host gave {len(got)} of the pool's {layout.custody_blocks} blocks "
                f"to the engine; is another engine using pool {self.settings.pool!r}?"
            )
        self.pool, self._incarnation, self._peers = pool, incarnation, set()

    def _host_restarted(self) -> bool:
        """Whether the host process restarted since the KV cache was
        registered with it. Then its reads and pins are gone with it: its
        transport died with it, so no transfer of the old process touches
        a block any more. The reads in flight are reported failed, their
        blocks invalid; the pins are held until their lease, since a
        decode may read them within it; and the KV cache is registered with
        the new process."""
        self._checked = time.monotonic()
        try:
            incarnation = self.client.status(timeout=self.settings.peer_timeout_s).incarnation
        except CustodyError:
            return False  # down: calls fail and are reported so meanwhile
        if incarnation == self._incarnation:
            return False
        log.error(
            "custody.vllm: rank %d: the host restarted (incarnation %#x, was %#x): %d reads failed, %d pins held "
            "to their lease; registering the KV cache again",
            self.rank,
            incarnation,
            self._incarnation,
            len(self._reading),
            len(self._pinned),
        )
        res = self._later()
        for request, blocks in self._reading.values():
            res.finished_recving.add(request)
            res.failed_recving.add(request)
            res.invalid_blocks.update(blocks)
        self._reading.clear()
        self._orphaned.update(self._pinned)
        self._pinned.clear()
        # vLLM hears of the failed reads at the next step, after this: a
        # restarted host fences any transport its predecessor left behind
        # before it gives the engine a block (the Alloc of _attach).
        self._attach(self._need_layout())
        return True

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                for f in self.client.watch_finished(stop=self._stop):
                    self._reports.put(f)
            except CustodyError as e:
                if self._stop.is_set():
                    return
                log.error(
                    "custody.vllm: rank %d: watching finished reports failed: %s; watching again",
                    self.rank,
                    e,
                )
                self._stop.wait(0.1)

    def _need_layout(self) -> Layout:
        if self.layout is None:
            raise RuntimeError("custody.vllm: a transfer before vLLM registered its KV cache")
        return self.layout

    def start(self, meta: CustodyMetadata) -> None:
        """Pin this step's sends and post this step's reads."""
        now = time.monotonic()
        busy = self._reading or self._pinned or self._unread or meta.recvs or meta.sends
        if busy and now - self._checked > _CHECK_S:
            self._host_restarted()
        for request, deadline in list(self._orphaned.items()):
            if now >= deadline:
                del self._orphaned[request]
                self._later().finished_sending.add(request)
        pending, self._unpinned = self._unpinned, []
        for s, deadline in pending:
            self._pin(s, deadline, now)
        for s in meta.sends:
            self._pin(s, now + self.settings.lease_s, now)
        unread, self._unread = self._unread, []
        for r, deadline in unread:
            self._read(r, deadline, now, retry=True)
        for r in meta.recvs:
            self._read(r, now + self.settings.peer_timeout_s, now, retry=False)

    def _pin(self, s: Send, deadline: float, now: float) -> None:
        layout = self._need_layout()
        remaining = deadline - now
        if remaining <= 0:
            # Never pinned: no decode read it through custody within the
            # lease, which is what the lease gives a decode.
            log.error(
                "custody.vllm: rank %d: request %s: its blocks were never pinned on the host within the lease; handing them back",
                self.rank,
                s.request,
            )
            self._later().finished_sending.add(s.request)
            self._handed_back.add(s.request)
            return

        def pin() -> None:
            self.client.expect_send(
                s.request,
                s.token,
                "",
                self.pool,
                layout.to_custody(s.blocks),
                1,
                remaining,
                timeout=self.settings.peer_timeout_s,
            )

        try:
            self._again_if_restarted(pin)
        except Duplicate:
            pass  # an earlier attempt got through (its reply was lost)
        except InvalidArgument as e:
            raise RuntimeError(
                f"custody.vllm: request {s.request}: the host refused to pin its blocks: {e}"
            ) from e
        except CustodyError as e:
            log.warning(
                "custody.vllm: rank %d: request %s: pinning its blocks failed (%s); retrying",
                self.rank,
                s.request,
                e,
            )
            self._unpinned.append((s, deadline))
            return
        self._pinned[s.request] = deadline

    def _again_if_restarted(self, call: Callable[[], None]) -> None:
        """call, and once more if it failed because the host restarted
        (the KV cache is then registered with the new host process)."""
        try:
            call()
        except CustodyError:
            if not self._host_restarted():
                raise
            call()

    def _read(self, r: Recv, deadline: float, now: float, retry: bool) -> None:
        """Post r's read, once.

        What a failed call means for r's blocks decides what follows. A
        refusal (the host answered that it took nothing: bad input, a
        failed handshake) fails r at once: its blocks were never lent.
        Unavailable, DeadlineExceeded and UnknownOutcome may hide a read the
        host took (a reply lost with a dying host, or a slow one): the same
        read is posted again each step until deadline, and a host that
        answers the retry Duplicate had taken it (the host tells a retry by
        its id and token), so r waits for its report, unless that came
        before the retry (_translate). Past the deadline, a host that refuses connections
        is gone, and its transport with it: r fails. A host that answers
        but never in time may hold the read: r waits for a report or the
        host's restart, its blocks never handed back meanwhile."""
        layout = self._need_layout()
        if len(r.remote_hosts) != self.tp_size or len(r.remote_names) != self.tp_size:
            # Rank r reads rank r's share of each block: a prefill of
            # another TP size has shares of another size.
            self._fail(
                r,
                f"the prefill has {len(r.remote_hosts)} TP ranks, this decode {self.tp_size}; "
                "custody.vllm pairs rank r with rank r: run both with one TP size",
            )
            return
        address, peer = r.remote_hosts[self.rank], r.remote_names[self.rank]
        remote = Layout(
            path="",
            block_bytes=layout.block_bytes,
            num_blocks=r.remote_num_blocks,
            layers=layout.layers,
        )

        def read() -> None:
            if peer not in self._peers:
                self.client.connect_peer(
                    peer,
                    [RemoteRank(address=address, pool=r.remote_pool)],
                    timeout=self.settings.peer_timeout_s,
                )
                self._peers.add(peer)
            part = Part(
                pool=self.pool,
                local=layout.to_custody(r.local_blocks),
                rank=0,
                remote=remote.to_custody(r.remote_blocks),
            )
            self.client.read(
                r.remote_request, r.token, peer, True, [part], timeout=self.settings.peer_timeout_s
            )

        try:
            self._again_if_restarted(read)
        except CustodyError as e:
            if retry and isinstance(e, Duplicate):
                pass  # an earlier attempt got through
            elif isinstance(e, Unavailable | DeadlineExceeded | UnknownOutcome):
                if now < deadline:
                    self._unread.append((r, deadline))
                    return
                if not _host_gone(e):
                    log.error(
                        "custody.vllm: rank %d: request %s: whether the host took its read is unknown (%s); "
                        "its blocks stay lent until the host reports it or restarts",
                        self.rank,
                        r.request,
                        e,
                    )
                    self._reading[r.remote_request] = (r.request, r.local_blocks)
                    return
                self._fail(r, f"the host is gone ({e}), and its transport with it")
                return
            else:
                self._fail(r, str(e))
                return
        except ValueError as e:
            self._fail(r, str(e))
            return
        self._reading[r.remote_request] = (r.request, r.local_blocks)

    def _fail(self, r: Recv, why: str) -> None:
        """A read custody never took: its blocks were never lent, so they
        are invalid (not loaded) and safe."""
        log.error(
            "custody.vllm: rank %d: request %s: reading its KV failed: %s",
            self.rank,
            r.request,
            why,
        )
        res = self._later()
        res.finished_recving.add(r.request)
        res.failed_recving.add(r.request)
        res.invalid_blocks.update(r.local_blocks)

    def _later(self) -> Results:
        if self._held is None:
            self._held = Results()
        return self._held

    def transfer_results(self) -> Results:
        """What finished since the last step.

        A round with quarantined blocks is held back one step, so that the
        scheduler pins the blocks (this step's worker metadata) before the
        request that held them is reported and vLLM frees its blocks."""
        out, self._held = self._held or Results(), None
        layout = self.layout
        while layout is not None:
            try:
                f = self._reports.get_nowait()
            except queue.Empty:
                break
            res = Results()
            self._translate(f, layout, res)
            q = {layout.to_vllm(b.block) for b in f.quarantined if b.pool == self.pool}
            if q:
                self._quarantined |= q
                self._merge(self._later(), res)
            else:
                self._merge(out, res)
        self._load_errors = out.invalid_blocks
        return out

    def _translate(self, f: Finished, layout: Layout, res: Results) -> None:
        sent = set(f.finished_sending) | {x.request for x in f.failed if x.sending}
        late = sent & self._handed_back  # vLLM had them back at their lease
        self._handed_back -= late
        sent -= late
        self._unpinned = [(u, d) for u, d in self._unpinned if u.request not in sent]
        for request in f.finished_sending:
            if request in sent:
                res.finished_sending.add(request)
                self._pinned.pop(request, None)
        failed = {x.request: x for x in f.failed}
        for x in f.failed:
            if x.sending and x.request in sent:
                # A pin that ended in failure (its lease ran out): the
                # blocks are back, and vLLM frees them as sent.
                log.warning(
                    "custody.vllm: rank %d: request %s: hand-off failed: %s",
                    self.rank,
                    x.request,
                    x.reason,
                )
                res.finished_sending.add(x.request)
                self._pinned.pop(x.request, None)
        # A failed read is in finished_recving too, with its reason in failed.
        for rid in f.finished_recving:
            got = self._reading.pop(rid, None)
            if got is None:
                # A read whose reply was lost, reported before its retry:
                # the first attempt got through.
                for i, (r, _) in enumerate(self._unread):
                    if r.remote_request == rid:
                        del self._unread[i]
                        got = (r.request, r.local_blocks)
                        break
            if got is None:
                log.warning(
                    "custody.vllm: rank %d: the host reported a read %s this worker did not post",
                    self.rank,
                    rid,
                )
                continue
            res.finished_recving.add(got[0])
            why = failed.get(rid)
            if why is not None and not why.sending:
                log.warning(
                    "custody.vllm: rank %d: request %s: reading its KV failed: %s",
                    self.rank,
                    got[0],
                    why.reason,
                )
                res.failed_recving.add(got[0])
        res.invalid_blocks.update(
            layout.to_vllm(b.block) for b in f.invalid_blocks if b.pool == self.pool
        )

    @staticmethod
    def _merge(into: Results, r: Results) -> None:
        into.finished_sending |= r.finished_sending
        into.finished_recving |= r.finished_recving
        into.failed_recving |= r.failed_recving
        into.invalid_blocks |= r.invalid_blocks

    def load_errors(self) -> set[int]:
        """This step's blocks that failed to load (vLLM block ids)."""
        return self._load_errors

    def worker_meta(self) -> CustodyWorkerMetadata | None:
        """Quarantined blocks for the scheduler, once each."""
        if not self._quarantined:
            return None
        meta, self._quarantined = CustodyWorkerMetadata(quarantined=self._quarantined), set()
        return meta

    def shutdown(self) -> None:
        """Stop watching, close the client and remove the KV cache's file."""
        self._stop.set()
        self.client.close()
        if self._watcher is not None:
            self._watcher.join(timeout=10)
        self.regions.remove()
