"""The errors of custody's engine API client.

Every failed call raises a :class:`CustodyError`: the host's gRPC status code
and its message, which names what was wrong. Each code the host uses has its
own subclass, whose docstring says what the caller does next; catch the
subclass (``except custody.Unavailable``) rather than comparing codes.
"""

from __future__ import annotations

import grpc

ERROR_DOMAIN = "custody.engine.v1"
"""The domain of the google.rpc.ErrorInfo details the host attaches to an
engine API error, whose reason tells apart errors of one code."""

REASON_HANDSHAKE_FAILED = "HANDSHAKE_FAILED"
"""The ErrorInfo reason of :class:`HandshakeFailed`."""

__all__ = [
    "ERROR_DOMAIN",
    "REASON_HANDSHAKE_FAILED",
    "Backend",
    "Busy",
    "Canceled",
    "CustodyError",
    "DeadlineExceeded",
    "Duplicate",
    "HandshakeFailed",
    "HostRestarted",
    "InvalidArgument",
    "NotFound",
    "ResourceExhausted",
    "Unavailable",
    "UnknownOutcome",
    "Unsupported",
    "Watching",
    "error_from_rpc",
]


class CustodyError(Exception):
    """A failed engine API call: ``code`` is the host's gRPC status code and
    ``message`` its message, which names what was wrong (it may be empty);
    ``reason`` is the reason of the ErrorInfo of ERROR_DOMAIN the host
    attached, "" when none.

    A code without a subclass of its own (one the host does not use, or a
    watch that saw the host break the report stream's order, DATA_LOSS) is
    raised as a CustodyError itself.
    """

    code: grpc.StatusCode
    message: str
    reason: str

    def __init__(self, code: grpc.StatusCode, message: str = "", reason: str = "") -> None:
        super().__init__(code, message, reason)
        self.code = code
        self.message = message
        self.reason = reason

    def __str__(self) -> str:
        name = str(self.code.name) if isinstance(self.code, grpc.StatusCode) else str(self.code)
        return f"{name}: {self.message}" if self.message else name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.message!r})"


class _Coded(CustodyError):
    """A CustodyError whose subclass fixes its code (``CODE``)."""

    CODE: grpc.StatusCode = grpc.StatusCode.UNKNOWN
    REASON: str = ""

    def __init__(self, message: str = "") -> None:
        Exception.__init__(self, message)
        self.code = self.CODE
        self.message = message
        self.reason = self.REASON


class Unavailable(_Coded):
    """UNAVAILABLE: the host stopped, its transport restarts, a peer's
    handshake runs or the connection broke. Retry."""

    CODE = grpc.StatusCode.UNAVAILABLE


class InvalidArgument(_Coded):
    """INVALID_ARGUMENT: the call's input was wrong; the message says what.
    The call changed nothing."""

    CODE = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(_Coded):
    """DEADLINE_EXCEEDED: the caller's timeout or a transport call's timeout
    passed."""

    CODE = grpc.StatusCode.DEADLINE_EXCEEDED


class Canceled(_Coded):
    """CANCELLED: the call was canceled."""

    CODE = grpc.StatusCode.CANCELLED


class Backend(_Coded):
    """INTERNAL: the transport failed; the host's log says why."""

    CODE = grpc.StatusCode.INTERNAL


class UnknownOutcome(_Coded):
    """UNKNOWN: whether a transport call took effect is unknown; its request
    is reported failed once the transport is fenced."""

    CODE = grpc.StatusCode.UNKNOWN


class Busy(_Coded):
    """FAILED_PRECONDITION: something still holds what the call would free,
    or a pool is poisoned; the message says which."""

    CODE = grpc.StatusCode.FAILED_PRECONDITION


class HandshakeFailed(_Coded):
    """FAILED_PRECONDITION with reason HANDSHAKE_FAILED: the last attempt of
    the peer's handshake failed; the message names the peer and the cause
    (``peer "NAME": handshake failed: CAUSE``), as it stays until an attempt
    succeeds. The call took nothing. A call within the attempt's backoff
    (10 ms doubling to 2 s) is refused with it; the first call past it
    starts another attempt, so retrying at the engine's own pace connects a
    peer that came up; ``connect_peer`` starts an attempt at once (with
    other ranks, when they were wrong). It is not a Busy."""

    CODE = grpc.StatusCode.FAILED_PRECONDITION
    REASON = REASON_HANDSHAKE_FAILED


class NotFound(_Coded):
    """NOT_FOUND: the transport does not know what the call named."""

    CODE = grpc.StatusCode.NOT_FOUND


class Unsupported(_Coded):
    """UNIMPLEMENTED: the transport does not offer what the call needs."""

    CODE = grpc.StatusCode.UNIMPLEMENTED


class ResourceExhausted(_Coded):
    """RESOURCE_EXHAUSTED: a message exceeded a size limit."""

    CODE = grpc.StatusCode.RESOURCE_EXHAUSTED


class HostRestarted(_Coded):
    """ABORTED: a report cursor was not the host process's (the host
    restarted since it was read); nothing was acknowledged. Start again from
    cursor 0 (``Client.watch_finished`` does so itself)."""

    CODE = grpc.StatusCode.ABORTED


class Duplicate(_Coded):
    """ALREADY_EXISTS: the call repeats a request the host took, by id,
    token and kind (in flight, or among the last reported): a retry of a
    call whose reply was lost got through the first time. Nothing new was
    taken; the request's one report comes, or came, as for the first."""

    CODE = grpc.StatusCode.ALREADY_EXISTS


class Watching(RuntimeError):
    """A ``watch_finished`` of the same Client is still open: one client
    processes its host's reports in order, through one watch at a time. Close
    the open watch (or let it end) first."""


_BY_REASON: dict[tuple[grpc.StatusCode, str], type[_Coded]] = {
    (cls.CODE, cls.REASON): cls
    for cls in (
        HandshakeFailed,
        Unavailable,
        InvalidArgument,
        DeadlineExceeded,
        Canceled,
        Backend,
        UnknownOutcome,
        Busy,
        NotFound,
        Unsupported,
        ResourceExhausted,
        HostRestarted,
        Duplicate,
    )
}


def error_from_rpc(err: grpc.RpcError) -> CustodyError:
    """The CustodyError for a failed gRPC call: the subclass of its status
    code (and of the reason of the ErrorInfo of ERROR_DOMAIN in its status
    details, where one names a subclass), carrying its code, details and
    reason; a code without a subclass gives a CustodyError itself, and an
    RpcError that carries no status counts as UNKNOWN."""
    code_fn = getattr(err, "code", None)
    details_fn = getattr(err, "details", None)
    code = code_fn() if callable(code_fn) else None
    details = details_fn() if callable(details_fn) else None
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    message = details if isinstance(details, str) else ""
    reason = _reason(err)
    cls = _BY_REASON.get((code, reason)) or _BY_REASON.get((code, ""))
    if cls is None:
        return CustodyError(code, message, reason)
    e = cls(message)
    e.reason = reason
    return e


# The status details travel as a google.rpc.Status in the trailing metadata
# grpc-status-details-bin. They are decoded here by hand (three small
# messages) rather than with googleapis-common-protos, which the client
# would otherwise need for this alone:
#   google.rpc.Status    {int32 code = 1; string message = 2; repeated Any details = 3}
#   google.protobuf.Any  {string type_url = 1; bytes value = 2}
#   google.rpc.ErrorInfo {string reason = 1; string domain = 2; map metadata = 3}
_STATUS_DETAILS_KEY = "grpc-status-details-bin"
_ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"


def _reason(err: grpc.RpcError) -> str:
    """The reason of the first ErrorInfo of ERROR_DOMAIN in err's status
    details; "" when there is none or the details do not parse."""
    md_fn = getattr(err, "trailing_metadata", None)
    md = md_fn() if callable(md_fn) else None
    for item in md or ():
        try:
            key, value = item
        except (TypeError, ValueError):
            continue
        if key != _STATUS_DETAILS_KEY or not isinstance(value, bytes):
            continue
        try:
            for field, any_bytes in _fields(value):
                if field != 3:
                    continue
                any_fields = dict(_fields(any_bytes))
                if any_fields.get(1, b"") != _ERROR_INFO_TYPE.encode():
                    continue
                info = dict(_fields(any_fields.get(2, b"")))
                if info.get(2, b"") == ERROR_DOMAIN.encode():
                    return info.get(1, b"").decode("utf-8", "replace")
        except ValueError:
            return ""
    return ""


def _fields(buf: bytes) -> list[tuple[int, bytes]]:
    """The length-delimited fields of a protobuf message, as (field number,
    bytes); fields of other wire types are skipped. ValueError when buf is
    not a protobuf message."""
    out: list[tuple[int, bytes]] = []
    i = 0

    def varint() -> int:
        nonlocal i
        n = shift = 0
        while True:
            if i >= len(buf) or shift > 63:
                raise ValueError("truncated varint")
            b = buf[i]
            i += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return n

    while i < len(buf):
        tag = varint()
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            varint()
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            n = varint()
            if i + n > len(buf):
                raise ValueError("truncated field")
            out.append((field, buf[i : i + n]))
            i += n
        else:
            raise ValueError(f"wire type {wire}")
        if i > len(buf):
            raise ValueError("truncated field")
    return out
