"""informerd: shared Kubernetes informers and central workqueues, from Python.

The asyncio :class:`Client` reaches a daemon; :mod:`informerd.errors` holds the exceptions every
call raises; :mod:`informerd.testing` starts real daemons and API servers for tests.
"""

from informerd.client import Client
from informerd.connection import Backoff, ConnectionOptions
from informerd.errors import (
    Cancelled,
    Conflict,
    FailedPrecondition,
    InformerdError,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Timeout,
    Unavailable,
)

__all__ = [
    "Backoff",
    "Cancelled",
    "Client",
    "Conflict",
    "ConnectionOptions",
    "FailedPrecondition",
    "InformerdError",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "ResourceExhausted",
    "Timeout",
    "Unavailable",
]
