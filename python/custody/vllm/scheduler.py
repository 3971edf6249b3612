"""The connector's scheduler side: which requests pull, which hand off.

A prefill request carries ``kv_transfer_params = {"do_remote_decode":
True}``. When it finishes, :meth:`SchedulerSide.request_finished` keeps its
blocks (vLLM frees them only once a worker reports the request in
``finished_sending``) and returns the parameters a decode needs: the
prefill hosts' metadata endpoints, the request id, the blocks and the
notification token. The next step's metadata tells the workers to pin the
blocks on their hosts (ExpectSend with the lease).

A decode request carries those parameters with ``do_remote_prefill``;
:meth:`get_num_new_matched_tokens` claims the prompt's tokens as loaded
asynchronously, :meth:`update_state_after_alloc` records the blocks vLLM
allocated for them, and the next step's metadata tells the workers to read
them (one Read, one part per rank).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from custody.client import Client, new_token
from custody.errors import CustodyError
from custody.vllm.config import Settings
from custody.vllm.metadata import CustodyMetadata, CustodyWorkerMetadata, Recv, Send

if TYPE_CHECKING:
    from vllm.v1.core.block_pool import BlockPool
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

log = logging.getLogger("custody.vllm")

_DECODE_PARAMS = (
    "remote_request_id",
    "remote_block_ids",
    "remote_hosts",
    "remote_names",
    "remote_pool",
    "remote_num_blocks",
    "remote_token",
)


class SchedulerSide:
    """Scheduler-side state of CustodyConnector (one per engine)."""

    def __init__(self, settings: Settings, tp_size: int, num_blocks: int) -> None:
        self.settings = settings
        self.tp_size = tp_size
        self.num_blocks = num_blocks
        self._sends: list[Send] = []
        self._recvs: list[Recv] = []
        self._block_pool: BlockPool | None = None
        # vLLM blocks held out of the allocator for good (quarantined).
        self.quarantined: set[int] = set()
        self._names: list[str] | None = None

    def host_names(self) -> list[str]:
        """The names of this engine's hosts, one per rank: a decode's host
        connects to a peer by the name its certificate carries."""
        if self._names is None:
            names = []
            for r in range(self.tp_size):
                with Client(self.settings.socket_of(r)) as c:
                    names.append(c.status(timeout=self.settings.peer_timeout_s).name)
            self._names = names
        return self._names

    def bind_block_pool(self, pool: BlockPool) -> None:
        """Keep the block pool, through which quarantined blocks are held
        out of the allocator."""
        self._block_pool = pool

    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int, bool]:
        """A decode request loads its whole prompt's KV from the prefill,
        asynchronously; vLLM recomputes the last token to sample the next."""
        params = request.kv_transfer_params
        if params and params.get("do_remote_prefill"):
            missing = [k for k in _DECODE_PARAMS if k not in params]
            if missing:
                # A client's bad input must not stop the engine: the decode
                # computes the prompt itself.
                log.error(
                    "custody.vllm: request %s: kv_transfer_params lack %s; computing its prompt here",
                    request.request_id,
                    missing,
                )
                params["do_remote_prefill"] = False
                return 0, False
            expires = params.get("remote_expires_at")
            if (
                isinstance(expires, (int, float))
                and time.time() + self.settings.read_margin_s >= expires
            ):
                # The prefill's lease ends before a read could: it may have
                # its blocks back, and reuse them.
                log.warning(
                    "custody.vllm: request %s: the prefill's lease on its blocks ends in %.1f s, under read_margin_s %.1f s; computing its prompt here",
                    request.request_id,
                    expires - time.time(),
                    self.settings.read_margin_s,
                )
                params["do_remote_prefill"] = False
                return 0, False
            count = len(request.prompt_token_ids or []) - num_computed_tokens
            if count > 0:
                return count, True
        return 0, False

    def update_state_after_alloc(
        self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int
    ) -> None:
        """Record the blocks a decode request's prompt KV is read into."""
        params = request.kv_transfer_params
        if not params or not params.get("do_remote_prefill"):
            return
        # One read per request, even if vLLM calls this again.
        params["do_remote_prefill"] = False
        if num_external_tokens == 0:
            return  # all of it hit the local prefix cache
        local = blocks.get_unhashed_block_ids()
        remote = list(params["remote_block_ids"])
        if len(local) > len(remote):
            # Let the read be refused (the host checks that both sides
            # name as many blocks), so vLLM hears of the request.
            log.error(
                "custody.vllm: request %s: %d blocks to load, but the prefill names %d",
                request.request_id,
                len(local),
                len(remote),
            )
        # Blocks a local prefix hit covers are not read: the tail is.
        remote = remote[max(0, len(remote) - len(local)) :]
        self._recvs.append(
            Recv(
                request=request.request_id,
                local_blocks=local,
                remote_request=str(params["remote_request_id"]),
                remote_blocks=remote,
                remote_hosts=list(params["remote_hosts"]),
                remote_names=list(params["remote_names"]),
                remote_pool=str(params["remote_pool"]),
                remote_num_blocks=int(params["remote_num_blocks"]),
                token=int(params["remote_token"]),
            )
        )

    def build_connector_meta(self) -> CustodyMetadata:
        """This step's sends and reads, handed to every worker."""
        meta = CustodyMetadata(sends=self._sends, recvs=self._recvs)
        self._sends, self._recvs = [], []
        return meta

    def request_finished(
        self, request: Request, block_ids: list[int]
    ) -> tuple[bool, dict[str, Any] | None]:
        """A prefill request's blocks stay with vLLM until a worker reports
        them sent; the returned parameters let a decode read them."""
        from vllm.v1.request import RequestStatus

        params = request.kv_transfer_params
        if not params or not params.get("do_remote_decode"):
            return False, None
        if (
            request.status
            not in (RequestStatus.FINISHED_LENGTH_CAPPED, RequestStatus.FINISHED_STOPPED)
            or not block_ids
        ):
            return False, None  # aborted: nothing to hand off
        try:
            names = self.host_names()
        except CustodyError as e:
            # No hand-off without the hosts: vLLM frees the blocks now, and
            # a decode without parameters computes the prompt itself.
            log.error(
                "custody.vllm: request %s: the prefill's hosts do not answer (%s); not handing it off",
                request.request_id,
                e,
            )
            return False, None
        token = new_token()
        # The lease starts when a worker pins the blocks, at the next step:
        # no sooner than now, so this expiry is never later than the real one.
        expires = time.time() + self.settings.lease_s
        self._sends.append(Send(request=request.request_id, blocks=list(block_ids), token=token))
        return True, {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_request_id": request.request_id,
            "remote_block_ids": list(block_ids),
            "remote_hosts": [self.settings.address_of(r) for r in range(self.tp_size)],
            "remote_names": names,
            "remote_pool": self.settings.pool,
            "remote_num_blocks": self.num_blocks,
            "remote_token": token,
            "remote_expires_at": expires,
        }

    def update_connector_output(self, output: KVConnectorOutput) -> None:
        """Hold quarantined blocks out of vLLM's allocator for good.

        A worker reports a quarantined block one step before it reports the
        request that held it finished, so the block is still allocated to
        that request here: one more reference keeps it allocated after the
        request frees it, and its prefix-cache entry goes, so no request
        reads it."""
        meta = output.kv_connector_worker_meta
        if not isinstance(meta, CustodyWorkerMetadata):
            return
        new = meta.quarantined - self.quarantined
        if not new:
            return
        self.quarantined |= new
        if self._block_pool is None:
            raise RuntimeError(
                "custody.vllm: blocks were quarantined before vLLM bound its block pool"
            )
        pool = self._block_pool
        pool.evict_blocks(set(new))
        pool.touch([pool.blocks[b] for b in sorted(new)])
