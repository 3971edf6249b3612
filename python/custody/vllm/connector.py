"""CustodyConnector: custody as a KV transfer backend of an unmodified vLLM.

Load it by configuration::

    --kv-transfer-config '{"kv_connector": "CustodyConnector",
                           "kv_connector_module_path": "custody.vllm",
                           "kv_role": "kv_both",
                           "kv_connector_extra_config": {"socket": "/run/custody/prefill-{rank}.sock",
                                                         "address": "10.0.0.1:7100"}}'

It pulls as vLLM's NixlConnector does — the decode reads the prefill's
blocks — but every transfer resource is owned by a custody host, one per
TP rank, which reports a request only once no transfer of it can still
touch its blocks.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorTransferResults,
    KVConnectorWorkerMetadata,
)

from custody.vllm.config import Settings
from custody.vllm.metadata import CustodyMetadata
from custody.vllm.scheduler import SchedulerSide
from custody.vllm.worker import WorkerSide

if TYPE_CHECKING:
    from vllm.attention.backends.abstract import AttentionMetadata
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.block_pool import BlockPool
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request


class CustodyConnector(KVConnectorBase_V1):
    """A KVConnectorBase_V1 over custody hosts (see the module doc)."""

    def __init__(
        self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig
    ) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        kvt = self._kv_transfer_config
        self.settings = Settings.parse(kvt.kv_connector_extra_config, kvt.is_kv_producer)
        self.scheduler: SchedulerSide | None = None
        self.worker: WorkerSide | None = None
        if role == KVConnectorRole.SCHEDULER:
            self.scheduler = SchedulerSide(
                self.settings,
                vllm_config.parallel_config.tensor_parallel_size,
                kv_cache_config.num_blocks,
            )
        else:
            from vllm.distributed.parallel_state import (
                get_tensor_model_parallel_rank,
                get_tensor_model_parallel_world_size,
            )

            self.worker = WorkerSide(
                self.settings,
                get_tensor_model_parallel_rank(),
                str(kvt.engine_id),
                get_tensor_model_parallel_world_size(),
            )

    def _sched(self) -> SchedulerSide:
        assert self.scheduler is not None, "a scheduler-side call on a worker's connector"
        return self.scheduler

    def _work(self) -> WorkerSide:
        assert self.worker is not None, "a worker-side call on the scheduler's connector"
        return self.worker

    # Scheduler side.

    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        return self._sched().get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(
        self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int
    ) -> None:
        self._sched().update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        return self._sched().build_connector_meta()

    def request_finished(
        self, request: Request, block_ids: list[int]
    ) -> tuple[bool, dict[str, Any] | None]:
        return self._sched().request_finished(request, block_ids)

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        self._sched().update_connector_output(connector_output)

    def bind_gpu_block_pool(self, gpu_block_pool: BlockPool) -> None:
        self._sched().bind_block_pool(gpu_block_pool)

    def get_loaded_kv_cache_group_ids(self, request: Request) -> tuple[int, ...]:
        # The request's own blocks are transferred, in every group.
        return tuple(range(len(self._kv_cache_config.kv_cache_groups)))

    # Worker side.

    def get_mem_pool_context(self) -> AbstractContextManager[None] | None:
        return self._work().mem_pool_context() if self.worker is not None else None

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        self._work().register(kv_caches)

    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, CustodyMetadata)
        self._work().start(meta)

    def wait_for_layer_load(self, layer_name: str) -> None:
        return  # loads are whole-request and asynchronous

    def save_kv_layer(
        self,
        layer_name: str,
        kv_layer: torch.Tensor,
        attn_metadata: AttentionMetadata,
        **kwargs: Any,
    ) -> None:
        return  # the decode reads the prefill's blocks in place

    def wait_for_save(self) -> None:
        return

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        r = self._work().transfer_results()
        return KVConnectorTransferResults(
            finished_sending=r.finished_sending,
            finished_recving=r.finished_recving,
            failed_recving=r.failed_recving,
        )

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        r = self.get_transfer_results(finished_req_ids)
        return r.finished_sending or None, r.finished_recving or None

    def get_block_ids_with_load_errors(self) -> set[int]:
        return self._work().load_errors()

    def build_connector_worker_meta(self) -> KVConnectorWorkerMetadata | None:
        return self._work().worker_meta()

    def shutdown(self) -> None:
        if self.worker is not None:
            self.worker.shutdown()
