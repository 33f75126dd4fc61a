"""The informer API: shared List+Watch caches in the daemon, and what reads them.

    cms = await client.informers.ensure("v1", "ConfigMap", namespace="demo",
                                        indexes={"app": label_index("app")})
    await cms.wait_for_sync()
    obj = await cms.get("demo/settings")
    on_node = await pods.list(index=("node", "node-1"))
    async with cms.watch() as events:
        async for event in events:
            match event:
                case Added(object=obj, initial=initial): ...
                case Updated(object=obj, old_object=old): ...
                case Deleted(object=obj, tombstone=tombstone): ...
                case Synced(): ...
                case Resnapshot(keys=n): ...
                case Reconnecting(cause=error): ...

Ensuring is idempotent: an equal spec returns the same running informer, whoever asks, with the
same id across daemon restarts.

**Watch streams reconnect by themselves.** When a Watch stream breaks for a retryable reason
(UNAVAILABLE: the daemon restarted or the network failed), :class:`Watch` yields one
:class:`Reconnecting` event naming the cause, waits with jittered backoff (:class:`Backoff`),
re-ensures the client's informers when the daemon no longer knows this one (``Client.reensure``,
if this client ensured it: its id is stable for an equal spec) and watches again. The new stream
starts over like the first: the daemon's current objects as :class:`Added` with ``initial``,
then :class:`Synced`, then changes. So a consumer tells a restart by :class:`Reconnecting` (or,
equivalently, by initial ``Added`` events after a ``Synced``); a key it saw before
``Reconnecting`` that is not among the new initial objects was deleted meanwhile
(:class:`informerd.Store` handles this). The informer's deletion (INFORMER_DELETED), an unknown
informer that re-ensuring does not bring back, and every other error end the iteration by
raising it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import enum
import logging
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import grpc
import grpc.aio

from informerd.connection import Backoff
from informerd.errors import (
    InformerdError,
    NotFound,
    Timeout,
    Unavailable,
    from_rpc_error,
    invalid_field,
)
from informerd.objects import KubeObject
from informerd.v1 import informers_pb2, objects_pb2

if TYPE_CHECKING:
    from informerd.client import Client


def label_index(label_key: str) -> informers_pb2.IndexSpec:
    """An index by the value of one label."""
    return informers_pb2.IndexSpec(label_key=label_key)


def field_index(field_path: str) -> informers_pb2.IndexSpec:
    """An index by the value(s) of a field path, e.g. ``spec.volumes.configMap.name``."""
    return informers_pb2.IndexSpec(field_path=field_path)


def owner_index(
    kind: str = "", *, all_owners: bool = False, by_uid: bool = False
) -> informers_pb2.IndexSpec:
    """An index by owner (``Kind/name``, or the owner's uid with ``by_uid``)."""
    return informers_pb2.IndexSpec(
        owner=informers_pb2.OwnerIndex(kind=kind, all_owners=all_owners, by_uid=by_uid)
    )


def transform(
    *,
    keep_managed_fields: bool = False,
    drop_paths: Iterable[str] = (),
    keep_paths: Iterable[str] = (),
    metadata_only: bool = False,
) -> informers_pb2.TransformSpec:
    """What the informer keeps of each object (see TransformSpec in informers.proto)."""
    return informers_pb2.TransformSpec(
        keep_managed_fields=keep_managed_fields,
        drop_paths=list(drop_paths),
        keep_paths=list(keep_paths),
        metadata_only=metadata_only,
    )


_log = logging.getLogger("informerd.informers")

# The server's bounds (informers.proto): objects per response at most 10000, bytes at most 64 MiB.
_MAX_BATCH_SIZE = 10000
_MAX_BATCH_BYTES = 64 << 20
_UINT32_MAX = (1 << 32) - 1


def _count(name: str, value: int, maximum: int = _UINT32_MAX) -> int:
    """``value`` if it is an int in [0, maximum]; else InvalidArgument naming the argument."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        raise invalid_field(
            name, f"{value!r} is not an integer in [0, {maximum}] (0 means the server's default)"
        )
    return value


class ObjectList(list[KubeObject]):
    """Objects from an informer's cache, with the cache's resourceVersion when it answered."""

    def __init__(self, objects: Iterable[KubeObject] = (), resource_version: str = "") -> None:
        super().__init__(objects)
        self.resource_version = resource_version


class EventType(enum.Enum):
    """What a :data:`WatchEvent` says (the proto's ``WatchEvent.Type``, plus ``RECONNECTING``,
    which the SDK adds when it watches again after the stream broke)."""

    ADDED = "ADDED"
    UPDATED = "UPDATED"
    DELETED = "DELETED"
    SYNCED = "SYNCED"
    RESNAPSHOT = "RESNAPSHOT"
    RECONNECTING = "RECONNECTING"


@dataclasses.dataclass(frozen=True)
class Added:
    """The object was created, or (``initial``) is one of the objects the stream starts with."""

    object: KubeObject
    initial: bool = False
    type: ClassVar[EventType] = EventType.ADDED


@dataclasses.dataclass(frozen=True)
class Updated:
    """The object changed; ``old_object`` is its previous state when the watch asked for it
    (``include_old_object``), else None."""

    object: KubeObject
    old_object: KubeObject | None = None
    type: ClassVar[EventType] = EventType.UPDATED


@dataclasses.dataclass(frozen=True)
class Deleted:
    """The object was deleted; ``object`` is its last known state. ``tombstone``: the deletion
    was missed while disconnected and ``object`` may be stale (client-go's
    DeletedFinalStateUnknown)."""

    object: KubeObject
    tombstone: bool = False
    type: ClassVar[EventType] = EventType.DELETED


@dataclasses.dataclass(frozen=True)
class Synced:
    """Every initial object has been sent; changes follow."""

    type: ClassVar[EventType] = EventType.SYNCED


@dataclasses.dataclass(frozen=True)
class Resnapshot:
    """The subscriber fell more than ``buffer_size`` events behind: ``keys`` events follow, each
    the net change of one key since what the subscriber last saw of it (intermediate states are
    skipped, none is lost)."""

    keys: int
    type: ClassVar[EventType] = EventType.RESNAPSHOT


@dataclasses.dataclass(frozen=True)
class Reconnecting:
    """The stream broke (``cause``) and is being opened again (added by the SDK). The new stream
    starts over: current objects as initial :class:`Added`, then :class:`Synced`; keys seen before
    that are not among them were deleted meanwhile."""

    cause: InformerdError
    type: ClassVar[EventType] = EventType.RECONNECTING


WatchEvent = Added | Updated | Deleted | Synced | Resnapshot | Reconnecting
"""One event of :meth:`Informer.watch` (match on the class, or switch on ``event.type``)."""


def _event(proto: informers_pb2.WatchEvent) -> WatchEvent:
    kind = proto.type
    if kind == informers_pb2.WatchEvent.ADDED:
        return Added(KubeObject(proto.object), proto.initial)
    if kind == informers_pb2.WatchEvent.UPDATED:
        old = KubeObject(proto.old_object) if proto.HasField("old_object") else None
        return Updated(KubeObject(proto.object), old)
    if kind == informers_pb2.WatchEvent.DELETED:
        return Deleted(KubeObject(proto.object), proto.tombstone)
    if kind == informers_pb2.WatchEvent.SYNCED:
        return Synced()
    if kind == informers_pb2.WatchEvent.RESNAPSHOT:
        return Resnapshot(proto.resnapshot_keys)
    raise InformerdError(f"Watch: an event of unknown type {kind} (a newer daemon?)")


Item = TypeVar("Item")
StreamT = TypeVar("StreamT", bound="_Stream[Any]")
# The end of a stream (grpc-stubs do not declare it).
_EOF: object = grpc.aio.EOF  # type: ignore[attr-defined]


class _Stream(Generic[Item]):
    """An async iterator over a server stream that ``close()`` (or leaving ``async with``)
    cancels at once, whoever is reading."""

    _call: grpc.aio.UnaryStreamCall[Any, Any] | None = None
    _closed: bool = False

    def __aiter__(self: StreamT) -> StreamT:
        return self

    async def __anext__(self) -> Item:
        raise NotImplementedError

    async def __aenter__(self: StreamT) -> StreamT:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Cancels the stream; iteration ends (StopAsyncIteration)."""
        self._closed = True
        if self._call is not None:
            self._call.cancel()
            self._call = None

    async def _read(self) -> object:
        """The next response of the current call (``_EOF`` at its end); raises the
        call's error as an :class:`InformerdError`, StopAsyncIteration once closed."""
        call = self._call
        assert call is not None
        try:
            return await call.read()
        except grpc.RpcError as e:
            if self._closed:
                raise StopAsyncIteration from None
            raise from_rpc_error(e) from None
        except asyncio.CancelledError:
            if self._closed or call.cancelled():
                raise StopAsyncIteration from None
            raise


class ListStream(_Stream[ObjectList]):
    """The batches of one :meth:`Informer.list_batches` call (each an :class:`ObjectList` with
    the same resourceVersion)."""

    def __init__(self, call: grpc.aio.UnaryStreamCall[Any, Any]) -> None:
        self._call = call

    async def __anext__(self) -> ObjectList:
        if self._closed or self._call is None:
            raise StopAsyncIteration
        resp = await self._read()
        if resp is _EOF:
            self._call = None
            self._closed = True
            raise StopAsyncIteration
        assert isinstance(resp, informers_pb2.ListResponse)
        return ObjectList((KubeObject(o) for o in resp.objects), resp.resource_version)


class Watch(_Stream[WatchEvent]):
    """The events of one informer (see :meth:`Informer.watch` and the module doc): an async
    iterator that watches again by itself after a retryable failure; ``close()`` cancels it."""

    def __init__(
        self,
        informer: Informer,
        request: informers_pb2.WatchRequest,
        *,
        reconnect: bool,
        backoff: Backoff,
    ) -> None:
        self._informer = informer
        self._request = request
        self._reconnect = reconnect
        self._backoff = backoff
        self._pending: collections.deque[WatchEvent] = collections.deque()
        self._wait_s = 0.0
        # Events arrived since the last Reconnecting (a break then needs a marker).
        self._delivered = False
        # reensure() was tried since the last response (a second INFORMER_NOT_FOUND is final).
        self._reensured = False
        self._woken = asyncio.Event()
        self.reconnects = 0
        """How many times the stream broke and was opened again."""

    async def close(self) -> None:
        self._pending.clear()
        self._woken.set()
        await super().close()

    async def __anext__(self) -> WatchEvent:
        while True:
            if self._pending:
                return self._pending.popleft()
            if self._closed:
                raise StopAsyncIteration
            if self._call is None:
                await self._open()
                continue
            try:
                resp = await self._read()
            except InformerdError as e:
                self._call = None
                await self._broke(e)
                continue
            if resp is _EOF:
                self._call = None
                await self._broke(
                    Unavailable(
                        "the daemon ended the Watch stream", code=grpc.StatusCode.UNAVAILABLE
                    )
                )
                continue
            assert isinstance(resp, informers_pb2.WatchResponse)
            self._backoff.reset()
            self._reensured = False
            if resp.events:
                self._delivered = True
                self._pending.extend(_event(e) for e in resp.events)

    async def _open(self) -> None:
        if self._wait_s > 0:
            self._woken.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._woken.wait(), self._wait_s)
            self._wait_s = 0.0
            if self._closed:
                return
        client = self._informer._client
        self._call = client.stubs.informers.Watch(self._request, metadata=client.call_metadata())

    async def _broke(self, error: InformerdError) -> None:
        """Decides what a failed stream means: raise, or watch again (after a marker)."""
        if self._closed:
            return
        informer_gone = isinstance(error, NotFound) and error.reason == "INFORMER_NOT_FOUND"
        retryable = isinstance(error, Unavailable) and error.reason != "INFORMER_DELETED"
        client = self._informer._client
        if (
            not self._reconnect
            or not (retryable or informer_gone)
            or (informer_gone and (self._reensured or not client.remembers_informer(self._id)))
        ):
            raise error
        if self._delivered:
            self._delivered = False
            self.reconnects += 1
            self._pending.append(Reconnecting(error))
            _log.info("informer %s: the Watch stream broke (%s); watching again", self._id, error)
        if informer_gone:
            # The daemon restarted (or freed the informer): ensure it again, same spec, same id.
            self._reensured = True
            try:
                await client.reensure()
                return
            except (Unavailable, Timeout) as e:
                _log.info("informer %s: re-ensuring failed (%s); retrying", self._id, e)
                self._reensured = False
        self._wait_s = self._backoff.next()

    @property
    def _id(self) -> str:
        return self._informer.id


class Informer:
    """A handle on one running informer (cheap; many handles may name the same informer)."""

    def __init__(self, client: Client, info: informers_pb2.InformerInfo) -> None:
        self._client = client
        self.info = info

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def spec(self) -> informers_pb2.InformerSpec:
        return self.info.spec

    @property
    def namespaced(self) -> bool:
        return self.info.namespaced

    @property
    def kind(self) -> str:
        return self.info.kind

    async def refresh(self, timeout_s: float | None = None) -> informers_pb2.InformerInfo:
        """The informer's current info (state: synced, objects, reflector ...)."""
        self.info = await self._client.unary(
            self._client.stubs.informers.GetInformer,
            informers_pb2.GetInformerRequest(informer_id=self.id),
            timeout_s,
        )
        return self.info

    async def wait_for_sync(self, timeout_s: float = 60.0) -> informers_pb2.InformerInfo:
        """Returns once the informer's first list is in its cache; raises
        :class:`informerd.Timeout` (reason NOT_SYNCED, saying what the reflector is doing and
        its last error) after ``timeout_s``."""
        self.info = await self._client.unary(
            self._client.stubs.informers.WaitForSync,
            informers_pb2.WaitForSyncRequest(informer_id=self.id, timeout_ms=int(timeout_s * 1000)),
            timeout_s + 5.0,
        )
        return self.info

    async def get(self, key: str, timeout_s: float | None = None) -> KubeObject | None:
        """The cached object with ``key`` (``namespace/name`` or ``name``), or None."""
        resp = await self._client.unary(
            self._client.stubs.informers.Get,
            informers_pb2.GetRequest(informer_id=self.id, key=key),
            timeout_s,
        )
        return KubeObject(resp.object) if resp.found else None

    def list_batches(
        self,
        *,
        namespace: str = "",
        label_selector: str = "",
        field_selector: str = "",
        index: tuple[str, str] | None = None,
        batch_size: int = 0,
        max_batch_bytes: int = 0,
        timeout_s: float | None = None,
    ) -> ListStream:
        """The cached objects as the server streams them, one :class:`ObjectList` per batch
        (for big lists: nothing holds them all at once). Arguments as :meth:`list`; the whole
        stream must be read within ``timeout_s`` (the client's default deadline when None).
        Use ``async with`` (or ``close()``) to cancel a stream that is not read to its end."""
        request = informers_pb2.ListRequest(
            informer_id=self.id,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            batch_size=_count("batch_size", batch_size, _MAX_BATCH_SIZE),
            max_batch_bytes=_count("max_batch_bytes", max_batch_bytes, _MAX_BATCH_BYTES),
        )
        if index is not None:
            if (
                not isinstance(index, tuple)
                or len(index) != 2
                or not all(isinstance(part, str) for part in index)
                or not index[0]
            ):
                raise invalid_field(
                    "index", f"{index!r} is not a pair (index name, value) with a non-empty name"
                )
            request.index_name, request.index_value = index
        client = self._client
        call = client.stubs.informers.List(
            request,
            timeout=timeout_s if timeout_s is not None else client.options.timeout_s,
            metadata=client.call_metadata(),
        )
        return ListStream(call)

    async def list(
        self,
        *,
        namespace: str = "",
        label_selector: str = "",
        field_selector: str = "",
        index: tuple[str, str] | None = None,
        batch_size: int = 0,
        max_batch_bytes: int = 0,
        timeout_s: float | None = None,
    ) -> ObjectList:
        """Objects from the daemon's cache, filtered there: by ``namespace``, by label and field
        selectors (Kubernetes syntax), and by ``index=(index_name, value)`` (an index of the
        informer's spec, or ``"namespace"``). The result's ``resource_version`` is the cache's
        when it answered. ``batch_size`` (objects, at most 10000) and ``max_batch_bytes`` (at
        most 64 MiB) bound each streamed response; 0 takes the server's defaults (500 objects,
        2 MiB). Raises :class:`informerd.InvalidArgument` naming a bad argument or field (e.g.
        an index the informer does not have), :class:`informerd.NotFound` (reason
        INFORMER_NOT_FOUND) for an informer that does not exist."""
        result = ObjectList()
        async with self.list_batches(
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            index=index,
            batch_size=batch_size,
            max_batch_bytes=max_batch_bytes,
            timeout_s=timeout_s,
        ) as batches:
            async for batch in batches:
                result.extend(batch)
                result.resource_version = batch.resource_version
        return result

    def watch(
        self,
        *,
        namespace: str = "",
        buffer_size: int = 0,
        max_batch: int = 0,
        include_old_object: bool = False,
        max_batch_bytes: int = 0,
        reconnect: bool = True,
        backoff: Backoff | None = None,
    ) -> Watch:
        """The informer's events: the current objects as :class:`Added` (``initial``), then
        :class:`Synced`, then every change — each key's changes in order (across keys, in the
        order each key first had a change pending, as client-go's DeltaFIFO hands them out).
        ``namespace`` limits the stream to that namespace's objects ("" for all the informer
        has): a caller allowed to list and watch the resource in one namespace only reads a
        cluster-wide informer this way (as with ``list(namespace=)`` and ``get("ns/name")``).
        ``buffer_size`` is how many events the daemon keeps for this subscriber before it
        re-snapshots (:class:`Resnapshot`; 0: 4096), ``max_batch`` / ``max_batch_bytes`` bound
        each response (0: 256 events, 2 MiB), ``include_old_object`` fills
        :attr:`Updated.old_object`.

        With ``reconnect`` (the default) the stream is opened again after a retryable failure,
        announced by :class:`Reconnecting` (see the module doc); ``backoff`` spaces the
        attempts. The stream has no deadline: iterate it in a task and ``close()`` it (or use
        ``async with``) to stop."""
        request = informers_pb2.WatchRequest(
            informer_id=self.id,
            namespace=namespace,
            buffer_size=_count("buffer_size", buffer_size),
            max_batch=_count("max_batch", max_batch),
            include_old_object=include_old_object,
            max_batch_bytes=_count("max_batch_bytes", max_batch_bytes, _MAX_BATCH_BYTES),
        )
        return Watch(self, request, reconnect=reconnect, backoff=backoff or Backoff())

    async def delete(self, timeout_s: float | None = None) -> None:
        """Stops the informer in the daemon (for every user of it) and frees its cache."""
        await self._client.unary(
            self._client.stubs.informers.DeleteInformer,
            informers_pb2.DeleteInformerRequest(informer_id=self.id),
            timeout_s,
        )
        self._client.forget_informer(self.id)

    def __repr__(self) -> str:
        return f"<Informer {self.id}>"


class Informers:
    """``client.informers``: ensure informers and get handles on them."""

    def __init__(self, client: Client) -> None:
        self._client = client

    async def ensure(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str = "",
        label_selector: str = "",
        field_selector: str = "",
        indexes: Mapping[str, informers_pb2.IndexSpec] | None = None,
        transform: informers_pb2.TransformSpec | None = None,
        cluster: str = "",
        timeout_s: float | None = None,
    ) -> Informer:
        """Starts (or finds) the informer for this resource and returns a handle on it."""
        spec = informers_pb2.InformerSpec(
            cluster=cluster,
            api_version=api_version,
            kind=kind,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
        )
        for name, index in sorted((indexes or {}).items()):
            entry = spec.indexes.add()
            entry.CopyFrom(index)
            entry.name = name
        if transform is not None:
            spec.transform.CopyFrom(transform)
        return await self.ensure_spec(spec, timeout_s)

    async def ensure_resource(
        self,
        group: str,
        version: str,
        resource: str,
        *,
        namespace: str = "",
        timeout_s: float | None = None,
    ) -> Informer:
        """As :meth:`ensure`, naming the resource by group/version/plural."""
        spec = informers_pb2.InformerSpec(
            resource=objects_pb2.GroupVersionResource(
                group=group, version=version, resource=resource
            ),
            namespace=namespace,
        )
        return await self.ensure_spec(spec, timeout_s)

    async def ensure_spec(
        self, spec: informers_pb2.InformerSpec, timeout_s: float | None = None
    ) -> Informer:
        info = await self._client.unary(
            self._client.stubs.informers.EnsureInformer,
            informers_pb2.EnsureInformerRequest(spec=spec),
            timeout_s,
        )
        self._client.remember_informer(info.id, spec)
        return Informer(self._client, info)

    async def get(self, informer_id: str, timeout_s: float | None = None) -> Informer:
        """A handle on the informer with this id (NotFound if there is none)."""
        info = await self._client.unary(
            self._client.stubs.informers.GetInformer,
            informers_pb2.GetInformerRequest(informer_id=informer_id),
            timeout_s,
        )
        return Informer(self._client, info)
