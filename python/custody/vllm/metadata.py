"""What the connector's scheduler side tells its workers, and back."""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorMetadata,
    KVConnectorWorkerMetadata,
)


@dataclass
class Send:
    """A prefill's finished request whose blocks a decode will read: the
    worker pins them on its host (ExpectSend) until the decode's
    notification or the lease."""

    request: str
    blocks: list[int]
    token: int


@dataclass
class Recv:
    """A decode's request whose prompt KV is read from a prefill.

    ``request`` is vLLM's id here; ``remote_request`` the prefill's, which
    is the request's id on both custody hosts (the prefill's ExpectSend and
    the decode's Read meet on it, with ``token``)."""

    request: str
    local_blocks: list[int]
    remote_request: str
    remote_blocks: list[int]
    remote_hosts: list[str]
    remote_names: list[str]
    remote_pool: str
    remote_num_blocks: int
    token: int


@dataclass
class CustodyMetadata(KVConnectorMetadata):
    """One step's work for the workers."""

    sends: list[Send] = field(default_factory=list)
    recvs: list[Recv] = field(default_factory=list)


@dataclass
class CustodyWorkerMetadata(KVConnectorWorkerMetadata):
    """What a worker tells the scheduler side: vLLM blocks custody
    quarantined (it cannot prove that no transfer still touches them), which
    must never be allocated again."""

    quarantined: set[int] = field(default_factory=set)

    def aggregate(self, other: KVConnectorWorkerMetadata) -> KVConnectorWorkerMetadata:
        """The union over workers: a block quarantined on any rank is lost
        on every rank (one vLLM block id spans the ranks)."""
        assert isinstance(other, CustodyWorkerMetadata)
        return CustodyWorkerMetadata(quarantined=self.quarantined | other.quarantined)
