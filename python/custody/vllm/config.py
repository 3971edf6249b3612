"""The connector's settings: vLLM's ``kv_connector_extra_config``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_KEYS = {"socket", "address", "lease_s", "pool", "shm_dir", "peer_timeout_s", "read_margin_s"}


@dataclass(frozen=True)
class Settings:
    """What CustodyConnector is told by ``kv_connector_extra_config``.

    Attributes:
        socket: the engine socket of this rank's custody host; ``{rank}``
            stands for the tensor-parallel rank (one host per rank).
        address: this rank's host's metadata endpoint as its peers reach
            it (``metadata.listen`` of its config), ``{rank}`` as above;
            a prefill hands it to the decode in ``kv_transfer_params``.
            Needed by a producer only.
        lease_s: how long a prefill's blocks wait for the decode to read
            them before custody hands them back (ExpectSend's lease).
        pool: the name the KV cache is registered under on the host.
        shm_dir: where the KV cache's shared-memory file is made; the
            transport must be allowed to open files there (the fake's
            ``peer_dirs`` holds /dev/shm by default).
        peer_timeout_s: how long one engine API call may take.
        read_margin_s: a decode reads a prefill's blocks only while at
            least this much of the prefill's lease is left (its
            ``remote_expires_at``); later, the prefill may have its blocks
            back and reuse them, and the decode computes the prompt itself.
            Keep it above the decode host's hold cap (``escalation.cap``),
            which bounds how long a read runs before its transport is
            fenced.
    """

    socket: str
    address: str = ""
    lease_s: float = 60.0
    pool: str = "kv"
    shm_dir: str = "/dev/shm"
    peer_timeout_s: float = 10.0
    read_margin_s: float = 5.0

    @classmethod
    def parse(cls, extra: dict[str, Any] | None, producer: bool) -> Settings:
        """Settings from the extra config; a ValueError names the field
        that is missing or wrong."""
        extra = dict(extra or {})
        unknown = sorted(set(extra) - _KEYS)
        if unknown:
            raise ValueError(
                f"kv_connector_extra_config: unknown field(s) {unknown}; known: {sorted(_KEYS)}"
            )
        socket = extra.get("socket")
        if not isinstance(socket, str) or not socket:
            raise ValueError(
                "kv_connector_extra_config.socket: the custody host's engine socket is required (a path; {rank} for the TP rank)"
            )
        address = extra.get("address", "")
        if not isinstance(address, str):
            raise TypeError(
                f"kv_connector_extra_config.address: want a host:port string, got {address!r}"
            )
        if producer and not address:
            raise ValueError(
                "kv_connector_extra_config.address: a producer must name its host's metadata endpoint (host:port; {rank} for the TP rank)"
            )
        lease = extra.get("lease_s", cls.lease_s)
        if not isinstance(lease, (int, float)) or isinstance(lease, bool) or not 0 < lease <= 3600:
            raise ValueError(
                f"kv_connector_extra_config.lease_s: want seconds in (0, 3600], got {lease!r}"
            )
        timeout = extra.get("peer_timeout_s", cls.peer_timeout_s)
        if (
            not isinstance(timeout, (int, float))
            or isinstance(timeout, bool)
            or not 0 < timeout <= 600
        ):
            raise ValueError(
                f"kv_connector_extra_config.peer_timeout_s: want seconds in (0, 600], got {timeout!r}"
            )
        margin = extra.get("read_margin_s", cls.read_margin_s)
        if (
            not isinstance(margin, (int, float))
            or isinstance(margin, bool)
            or not 0 <= margin <= 3600
        ):
            raise ValueError(
                f"kv_connector_extra_config.read_margin_s: want seconds in [0, 3600], got {margin!r}"
            )
        pool = extra.get("pool", cls.pool)
        if not isinstance(pool, str) or not pool:
            raise ValueError(f"kv_connector_extra_config.pool: want a name, got {pool!r}")
        shm_dir = extra.get("shm_dir", cls.shm_dir)
        if not isinstance(shm_dir, str) or not shm_dir:
            raise ValueError(
                f"kv_connector_extra_config.shm_dir: want a directory, got {shm_dir!r}"
            )
        return cls(
            socket=socket,
            address=address,
            lease_s=float(lease),
            pool=pool,
            shm_dir=shm_dir,
            peer_timeout_s=float(timeout),
            read_margin_s=float(margin),
        )

    def socket_of(self, rank: int) -> str:
        """The engine socket of TP rank ``rank``."""
        return self.socket.replace("{rank}", str(rank))

    def address_of(self, rank: int) -> str:
        """The metadata endpoint of TP rank ``rank``'s host."""
        return self.address.replace("{rank}", str(rank))
