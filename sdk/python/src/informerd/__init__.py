"""informerd: shared Kubernetes informers and central workqueues, from Python.

The asyncio :class:`Client` reaches a daemon; :class:`Controller` runs reconcilers on a queue;
:mod:`informerd.errors` holds the exceptions every call raises; :mod:`informerd.testing` starts
real daemons and API servers for tests. :class:`Informer` reads a daemon's cache (``get``,
``list``) and streams its events (``watch``: :data:`WatchEvent`); :class:`Store` mirrors one
informer locally, with indexes and event handlers; :mod:`informerd.sync` is the blocking facade
for scripts and notebooks.
"""

from informerd import sync
from informerd.admin import Replica, ReplicaRole
from informerd.client import Client
from informerd.connection import Backoff, ConnectionOptions, add_connection_arguments
from informerd.controller import Context, Controller, ReconcileEvent, Result, TerminalError
from informerd.errors import (
    Cancelled,
    Conflict,
    FailedPrecondition,
    InformerdError,
    Internal,
    InvalidArgument,
    NotFound,
    NotLeader,
    PermissionDenied,
    ResourceExhausted,
    Timeout,
    Unauthenticated,
    Unavailable,
)
from informerd.informers import (
    Added,
    Deleted,
    EventType,
    Informer,
    ObjectList,
    Reconnecting,
    Resnapshot,
    Synced,
    Updated,
    Watch,
    WatchEvent,
    field_index,
    label_index,
    owner_index,
    transform,
)
from informerd.labels import label_matcher
from informerd.objects import KubeObject
from informerd.store import Store
from informerd.work import WorkStream

__all__ = [
    "Added",
    "Backoff",
    "Cancelled",
    "Client",
    "Conflict",
    "ConnectionOptions",
    "Context",
    "Controller",
    "Deleted",
    "EventType",
    "FailedPrecondition",
    "Informer",
    "InformerdError",
    "Internal",
    "InvalidArgument",
    "KubeObject",
    "NotFound",
    "NotLeader",
    "ObjectList",
    "PermissionDenied",
    "ReconcileEvent",
    "Reconnecting",
    "Replica",
    "ReplicaRole",
    "Resnapshot",
    "ResourceExhausted",
    "Result",
    "Store",
    "Synced",
    "TerminalError",
    "Timeout",
    "Unauthenticated",
    "Unavailable",
    "Updated",
    "Watch",
    "WatchEvent",
    "WorkStream",
    "add_connection_arguments",
    "field_index",
    "label_index",
    "label_matcher",
    "owner_index",
    "sync",
    "transform",
]
