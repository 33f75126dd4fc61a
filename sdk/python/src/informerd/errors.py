"""informerd's errors as Python exceptions, built from the server's machine-readable details.

Every error the daemon returns carries a ``google.rpc.ErrorInfo`` (domain ``informerd.io``) whose
reason names an ``ErrorReason`` (proto/informerd/v1/errors.proto) and whose metadata names what
was wrong (``field``, ``queue``, ``informer_id`` ...). :func:`from_rpc_error` turns a failed call
into one exception class per status-code family, with the reason, the metadata and the bad field
kept as attributes::

    try:
        await client.informers.ensure("v1", "ConfigMapp")
    except informerd.NotFound as e:
        print(e.reason, e.metadata)   # RESOURCE_NOT_FOUND {'kind': 'ConfigMapp', ...}

Switch on ``reason`` (a string, so reasons added by a newer daemon still arrive), not on messages.
"""

from __future__ import annotations

from collections.abc import Mapping

import grpc
from google.rpc import error_details_pb2, status_pb2

ERROR_DOMAIN = "informerd.io"
_DETAILS_KEY = "grpc-status-details-bin"


class InformerdError(Exception):
    """Base class of every error this SDK raises."""

    code: grpc.StatusCode | None
    reason: str
    metadata: Mapping[str, str]
    field: str | None

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode | None = None,
        reason: str = "",
        metadata: Mapping[str, str] | None = None,
        field: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason
        self.metadata = dict(metadata or {})
        self.field = field if field is not None else self.metadata.get("field")

    def __str__(self) -> str:
        parts = [self.message]
        if self.reason:
            parts.append(f"reason={self.reason}")
        if self.field:
            parts.append(f"field={self.field}")
        return " ".join(parts)


class InvalidArgument(InformerdError):
    """A request field is invalid (``field`` names it); fix the request, do not retry."""


class NotFound(InformerdError):
    """No such informer, queue, cluster or resource (``reason`` says which)."""


class Conflict(InformerdError):
    """The object exists with another definition (e.g. QUEUE_EXISTS_WITH_OTHER_SPEC)."""


class FailedPrecondition(InformerdError):
    """The daemon's state does not allow the call (no cluster, a shut-down queue, a stale lease)."""


class ResourceExhausted(InformerdError):
    """A limit was reached (e.g. SUBSCRIBER_LIMIT; CALLER_LIMIT: one of the caller's own limits,
    named by ``metadata["limit"]``: informers, queues, streams or inFlight)."""


class Unavailable(InformerdError):
    """The daemon cannot be reached or is shutting down: retry with backoff. Also
    AUTHORIZATION_UNAVAILABLE: the daemon could not ask the cluster whether to allow the call
    (the API server down), so it refused it; and :class:`NotLeader` (a follower of a replica
    set)."""


class NotLeader(Unavailable):
    """The daemon is a follower in a replica set: only the leader serves Queues and Work
    (UNAVAILABLE, reason NOT_LEADER). ``leader`` is the leader's identity and
    ``leader_address`` the ``host:port`` where it serves gRPC, both "" while no leader is known.
    The client follows the address by itself (see :meth:`informerd.Client.on_leader`); an
    :class:`Unavailable`, so code that retries those retries this too."""

    @property
    def leader(self) -> str:
        return self.metadata.get("leader", "")

    @property
    def leader_address(self) -> str:
        return self.metadata.get("leader_address", "")


class Timeout(InformerdError):
    """The call's deadline passed (also WaitForSync's NOT_SYNCED, with the reflector's state)."""


class PermissionDenied(InformerdError):
    """The caller is not allowed to do this (PERMISSION_DENIED, reason FORBIDDEN: the cluster's
    SubjectAccessReview refused it; ``metadata`` names the ``user``, ``verb``, ``group``,
    ``resource``, ``namespace`` and ``name`` refused). Also the base of :class:`Unauthenticated`.
    Do not retry: fix the caller's RBAC."""


class Unauthenticated(PermissionDenied):
    """The daemon does not know who the caller is (UNAUTHENTICATED, reason NOT_AUTHENTICATED):
    no credentials, or a bearer token the cluster rejected (invalid, expired, another
    audience). A :class:`PermissionDenied`, so code that catches that catches this too."""


class Cancelled(InformerdError):
    """The call was cancelled."""


class Internal(InformerdError):
    """A bug or an unexpected failure in the daemon or the SDK."""


def invalid_field(field: str, problem: str) -> InvalidArgument:
    """The error for a bad argument the SDK notices itself, shaped as the daemon reports a bad
    request field (INVALID_ARGUMENT, reason INVALID_FIELD, ``field``)."""
    return InvalidArgument(
        f"{field}: {problem}",
        code=grpc.StatusCode.INVALID_ARGUMENT,
        reason="INVALID_FIELD",
        field=field,
    )


_BY_CODE: dict[grpc.StatusCode, type[InformerdError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: Conflict,
    grpc.StatusCode.ABORTED: Conflict,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: Timeout,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.CANCELLED: Cancelled,
}


# Reasons with a class of their own (a subclass of their code's class).
_BY_REASON: dict[str, type[InformerdError]] = {"NOT_LEADER": NotLeader}


def _details(trailers: object) -> status_pb2.Status | None:
    for key, value in trailers or ():  # type: ignore[attr-defined]
        if key == _DETAILS_KEY and isinstance(value, bytes):
            status = status_pb2.Status()
            try:
                status.ParseFromString(value)
            except Exception:
                return None
            return status
    return None


def error_from_status(
    code: grpc.StatusCode, message: str, trailers: object = None
) -> InformerdError:
    """The exception for a call that ended with ``code``/``message`` and these trailers."""
    reason = ""
    metadata: dict[str, str] = {}
    field: str | None = None
    status = _details(trailers)
    if status is not None:
        for any_detail in status.details:
            if any_detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                any_detail.Unpack(info)
                if info.domain == ERROR_DOMAIN or not reason:
                    reason = info.reason
                    metadata.update(info.metadata)
            elif any_detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                any_detail.Unpack(bad)
                if bad.field_violations and field is None:
                    field = bad.field_violations[0].field
    cls = _BY_CODE.get(code, Internal)
    special = _BY_REASON.get(reason)
    if special is not None and issubclass(special, cls):
        cls = special
    return cls(f"{code.name}: {message}", code=code, reason=reason, metadata=metadata, field=field)


def from_rpc_error(error: grpc.RpcError) -> InformerdError:
    """The exception for a failed gRPC call (sync or asyncio)."""
    code_fn = getattr(error, "code", None)
    code = code_fn() if callable(code_fn) else grpc.StatusCode.UNKNOWN
    details_fn = getattr(error, "details", None)
    message = (details_fn() if callable(details_fn) else None) or str(error)
    trailers_fn = getattr(error, "trailing_metadata", None)
    trailers = trailers_fn() if callable(trailers_fn) else None
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    return error_from_status(code, message, trailers)
