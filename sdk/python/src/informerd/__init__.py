"""informerd: shared Kubernetes informers and central workqueues, from Python.

The asyncio :class:`Client` reaches a daemon; :class:`Controller` runs reconcilers on a queue;
:mod:`informerd.errors` holds the exceptions every call raises; :mod:`informerd.testing` starts
real daemons and API servers for tests.
"""

from informerd.client import Client
from informerd.connection import Backoff, ConnectionOptions
from informerd.controller import Context, Controller, Result, TerminalError
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
from informerd.objects import KubeObject
from informerd.work import WorkStream

__all__ = [
    "Backoff",
    "Cancelled",
    "Client",
    "Conflict",
    "ConnectionOptions",
    "Context",
    "Controller",
    "FailedPrecondition",
    "InformerdError",
    "Internal",
    "InvalidArgument",
    "KubeObject",
    "NotFound",
    "PermissionDenied",
    "ResourceExhausted",
    "Result",
    "TerminalError",
    "Timeout",
    "Unavailable",
    "WorkStream",
]
