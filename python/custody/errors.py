"""The errors of custody's engine API client.

Every failed call raises a :class:`CustodyError`: the host's gRPC status code
and its message, which names what was wrong. Each code the host uses has its
own subclass, whose docstring says what the caller does next; catch the
subclass (``except custody.Unavailable``) rather than comparing codes.
"""

from __future__ import annotations

import grpc

__all__ = [
    "Backend",
    "Busy",
    "Canceled",
    "CustodyError",
    "DeadlineExceeded",
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
    ``message`` its message, which names what was wrong (it may be empty).

    A code without a subclass of its own (one the host does not use, or a
    watch that saw the host break the report stream's order, DATA_LOSS) is
    raised as a CustodyError itself.
    """

    code: grpc.StatusCode
    message: str

    def __init__(self, code: grpc.StatusCode, message: str = "") -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        name = str(self.code.name) if isinstance(self.code, grpc.StatusCode) else str(self.code)
        return f"{name}: {self.message}" if self.message else name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.message!r})"


class _Coded(CustodyError):
    """A CustodyError whose subclass fixes its code (``CODE``)."""

    CODE: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str = "") -> None:
        Exception.__init__(self, message)
        self.code = self.CODE
        self.message = message


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
    """FAILED_PRECONDITION: something still holds what the call would free."""

    CODE = grpc.StatusCode.FAILED_PRECONDITION


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


class Watching(RuntimeError):
    """A ``watch_finished`` of the same Client is still open: one client
    processes its host's reports in order, through one watch at a time. Close
    the open watch (or let it end) first."""


_BY_CODE: dict[grpc.StatusCode, type[_Coded]] = {
    cls.CODE: cls
    for cls in (
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
    )
}


def error_from_rpc(err: grpc.RpcError) -> CustodyError:
    """The CustodyError for a failed gRPC call: the subclass of its status
    code, carrying its code and details; a code without a subclass (and an
    RpcError that carries no status, as UNKNOWN) gives a CustodyError itself.
    """
    code_fn = getattr(err, "code", None)
    details_fn = getattr(err, "details", None)
    code = code_fn() if callable(code_fn) else None
    details = details_fn() if callable(details_fn) else None
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    message = details if isinstance(details, str) else ""
    cls = _BY_CODE.get(code)
    if cls is None:
        return CustodyError(code, message)
    return cls(message)
