from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RegisterPoolRequest(_message.Message):
    __slots__ = ("name", "path", "offset", "block_size", "blocks")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    name: str
    path: str
    offset: int
    block_size: int
    blocks: int
    def __init__(self, name: _Optional[str] = ..., path: _Optional[str] = ..., offset: _Optional[int] = ..., block_size: _Optional[int] = ..., blocks: _Optional[int] = ...) -> None: ...

class RegisterPoolResponse(_message.Message):
    __slots__ = ("pool",)
    POOL_FIELD_NUMBER: _ClassVar[int]
    pool: int
    def __init__(self, pool: _Optional[int] = ...) -> None: ...

class AllocRequest(_message.Message):
    __slots__ = ("pool", "count")
    POOL_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    pool: int
    count: int
    def __init__(self, pool: _Optional[int] = ..., count: _Optional[int] = ...) -> None: ...

class AllocResponse(_message.Message):
    __slots__ = ("blocks",)
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    blocks: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, blocks: _Optional[_Iterable[int]] = ...) -> None: ...

class FreeRequest(_message.Message):
    __slots__ = ("pool", "blocks")
    POOL_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    pool: int
    blocks: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, pool: _Optional[int] = ..., blocks: _Optional[_Iterable[int]] = ...) -> None: ...

class RemoteRank(_message.Message):
    __slots__ = ("address", "pool")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    address: str
    pool: str
    def __init__(self, address: _Optional[str] = ..., pool: _Optional[str] = ...) -> None: ...

class ConnectPeerRequest(_message.Message):
    __slots__ = ("name", "ranks")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    name: str
    ranks: _containers.RepeatedCompositeFieldContainer[RemoteRank]
    def __init__(self, name: _Optional[str] = ..., ranks: _Optional[_Iterable[_Union[RemoteRank, _Mapping]]] = ...) -> None: ...

class RemovePeerRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class Part(_message.Message):
    __slots__ = ("pool", "local", "rank", "remote")
    POOL_FIELD_NUMBER: _ClassVar[int]
    LOCAL_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    REMOTE_FIELD_NUMBER: _ClassVar[int]
    pool: int
    local: _containers.RepeatedScalarFieldContainer[int]
    rank: int
    remote: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, pool: _Optional[int] = ..., local: _Optional[_Iterable[int]] = ..., rank: _Optional[int] = ..., remote: _Optional[_Iterable[int]] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("request_id", "peer", "parts", "notify_producer", "token")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    NOTIFY_PRODUCER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    peer: str
    parts: _containers.RepeatedCompositeFieldContainer[Part]
    notify_producer: bool
    token: int
    def __init__(self, request_id: _Optional[str] = ..., peer: _Optional[str] = ..., parts: _Optional[_Iterable[_Union[Part, _Mapping]]] = ..., notify_producer: _Optional[bool] = ..., token: _Optional[int] = ...) -> None: ...

class WriteRequest(_message.Message):
    __slots__ = ("request_id", "peer", "parts", "consumers", "lease_ms", "token")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    peer: str
    parts: _containers.RepeatedCompositeFieldContainer[Part]
    consumers: int
    lease_ms: int
    token: int
    def __init__(self, request_id: _Optional[str] = ..., peer: _Optional[str] = ..., parts: _Optional[_Iterable[_Union[Part, _Mapping]]] = ..., consumers: _Optional[int] = ..., lease_ms: _Optional[int] = ..., token: _Optional[int] = ...) -> None: ...

class ExpectSendRequest(_message.Message):
    __slots__ = ("request_id", "peer", "pool", "blocks", "consumers", "lease_ms", "token")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    peer: str
    pool: int
    blocks: _containers.RepeatedScalarFieldContainer[int]
    consumers: int
    lease_ms: int
    token: int
    def __init__(self, request_id: _Optional[str] = ..., peer: _Optional[str] = ..., pool: _Optional[int] = ..., blocks: _Optional[_Iterable[int]] = ..., consumers: _Optional[int] = ..., lease_ms: _Optional[int] = ..., token: _Optional[int] = ...) -> None: ...

class ExpectReceiveRequest(_message.Message):
    __slots__ = ("request_id", "peer", "pool", "blocks", "producers", "lease_ms", "token")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    peer: str
    pool: int
    blocks: _containers.RepeatedScalarFieldContainer[int]
    producers: int
    lease_ms: int
    token: int
    def __init__(self, request_id: _Optional[str] = ..., peer: _Optional[str] = ..., pool: _Optional[int] = ..., blocks: _Optional[_Iterable[int]] = ..., producers: _Optional[int] = ..., lease_ms: _Optional[int] = ..., token: _Optional[int] = ...) -> None: ...

class GetFinishedRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WatchFinishedRequest(_message.Message):
    __slots__ = ("cursor", "max_batch_bytes", "incarnation")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_BYTES_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    cursor: int
    max_batch_bytes: int
    incarnation: int
    def __init__(self, cursor: _Optional[int] = ..., max_batch_bytes: _Optional[int] = ..., incarnation: _Optional[int] = ...) -> None: ...

class AckFinishedRequest(_message.Message):
    __slots__ = ("cursor", "incarnation")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    cursor: int
    incarnation: int
    def __init__(self, cursor: _Optional[int] = ..., incarnation: _Optional[int] = ...) -> None: ...

class BlockRef(_message.Message):
    __slots__ = ("pool", "block")
    POOL_FIELD_NUMBER: _ClassVar[int]
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    pool: int
    block: int
    def __init__(self, pool: _Optional[int] = ..., block: _Optional[int] = ...) -> None: ...

class Failure(_message.Message):
    __slots__ = ("request_id", "sending", "reason")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SENDING_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    sending: bool
    reason: str
    def __init__(self, request_id: _Optional[str] = ..., sending: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class Finished(_message.Message):
    __slots__ = ("finished_sending", "finished_recving", "failed", "invalid_blocks", "quarantined", "cursor", "next", "more", "incarnation")
    FINISHED_SENDING_FIELD_NUMBER: _ClassVar[int]
    FINISHED_RECVING_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    INVALID_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    finished_sending: _containers.RepeatedScalarFieldContainer[str]
    finished_recving: _containers.RepeatedScalarFieldContainer[str]
    failed: _containers.RepeatedCompositeFieldContainer[Failure]
    invalid_blocks: _containers.RepeatedCompositeFieldContainer[BlockRef]
    quarantined: _containers.RepeatedCompositeFieldContainer[BlockRef]
    cursor: int
    next: int
    more: bool
    incarnation: int
    def __init__(self, finished_sending: _Optional[_Iterable[str]] = ..., finished_recving: _Optional[_Iterable[str]] = ..., failed: _Optional[_Iterable[_Union[Failure, _Mapping]]] = ..., invalid_blocks: _Optional[_Iterable[_Union[BlockRef, _Mapping]]] = ..., quarantined: _Optional[_Iterable[_Union[BlockRef, _Mapping]]] = ..., cursor: _Optional[int] = ..., next: _Optional[int] = ..., more: _Optional[bool] = ..., incarnation: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("name", "transport", "epoch", "in_flight", "retained", "retired", "quarantined_blocks", "fences", "transport_restarts", "peers", "native_regions", "native_peers", "native_dlists", "native_handles", "journal", "requests", "transport_pid", "poisoned_pools", "union_failed", "group_held", "group_writes", "group_reads", "group_expired", "incarnation", "engine_connections_refused")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    RETAINED_FIELD_NUMBER: _ClassVar[int]
    RETIRED_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    FENCES_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    NATIVE_REGIONS_FIELD_NUMBER: _ClassVar[int]
    NATIVE_PEERS_FIELD_NUMBER: _ClassVar[int]
    NATIVE_DLISTS_FIELD_NUMBER: _ClassVar[int]
    NATIVE_HANDLES_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_PID_FIELD_NUMBER: _ClassVar[int]
    POISONED_POOLS_FIELD_NUMBER: _ClassVar[int]
    UNION_FAILED_FIELD_NUMBER: _ClassVar[int]
    GROUP_HELD_FIELD_NUMBER: _ClassVar[int]
    GROUP_WRITES_FIELD_NUMBER: _ClassVar[int]
    GROUP_READS_FIELD_NUMBER: _ClassVar[int]
    GROUP_EXPIRED_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    ENGINE_CONNECTIONS_REFUSED_FIELD_NUMBER: _ClassVar[int]
    name: str
    transport: str
    epoch: int
    in_flight: int
    retained: int
    retired: int
    quarantined_blocks: int
    fences: int
    transport_restarts: int
    peers: _containers.RepeatedScalarFieldContainer[str]
    native_regions: int
    native_peers: int
    native_dlists: int
    native_handles: int
    journal: int
    requests: int
    transport_pid: int
    poisoned_pools: _containers.RepeatedScalarFieldContainer[str]
    union_failed: int
    group_held: int
    group_writes: int
    group_reads: int
    group_expired: int
    incarnation: int
    engine_connections_refused: int
    def __init__(self, name: _Optional[str] = ..., transport: _Optional[str] = ..., epoch: _Optional[int] = ..., in_flight: _Optional[int] = ..., retained: _Optional[int] = ..., retired: _Optional[int] = ..., quarantined_blocks: _Optional[int] = ..., fences: _Optional[int] = ..., transport_restarts: _Optional[int] = ..., peers: _Optional[_Iterable[str]] = ..., native_regions: _Optional[int] = ..., native_peers: _Optional[int] = ..., native_dlists: _Optional[int] = ..., native_handles: _Optional[int] = ..., journal: _Optional[int] = ..., requests: _Optional[int] = ..., transport_pid: _Optional[int] = ..., poisoned_pools: _Optional[_Iterable[str]] = ..., union_failed: _Optional[int] = ..., group_held: _Optional[int] = ..., group_writes: _Optional[int] = ..., group_reads: _Optional[int] = ..., group_expired: _Optional[int] = ..., incarnation: _Optional[int] = ..., engine_connections_refused: _Optional[int] = ...) -> None: ...
