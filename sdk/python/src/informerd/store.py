"""Store: a local mirror of one informer, fed by its Watch stream, so hot reads need no round trip.

    async with Store(pods, indexers={"by_node": lambda o: [o.body["spec"].get("nodeName", "")]},
                     on_delete=forget_pod) as store:
        await store.wait_synced(timeout_s=60)
        pod = store.get("default/web-0")
        on_node = store.by_index("by_node", "node-1")
        web = store.list(namespace="default", label_selector="app=web")

What client-go's ``SharedIndexInformer`` gives a Go controller (``GetIndexer()`` plus
``ResourceEventHandler``), over informerd: the daemon keeps the shared cache and talks to the API
server; a Store copies one informer's objects into the process through one Watch stream.

**Consistency.** The Store applies events in the order the daemon sends them, then calls the
handlers, so a handler reads a Store that already holds the change. Across a ``Resnapshot`` (the
Store fell ``buffer_size`` events behind) the net change of each key follows and the Store ends
at the daemon's state. Across a reconnect (daemon restart, network failure) the daemon's fresh
initial objects replace the contents: keys not among them are removed and ``on_delete`` is told
with ``tombstone=True`` (client-go's DeletedFinalStateUnknown), changed ones go to
``on_update``, new ones to ``on_add``. Reads between the break and the new ``Synced`` see the
last known state.

**Memory.** The Store keeps each object as a :class:`KubeObject` (its JSON bytes and the
daemon-parsed metadata); reads hand out fresh wrappers of the same bytes, so a parse of ``body``
(and any change to it) stays with the reader. Indexer functions get such a wrapper too: an
indexer that reads ``body`` parses the JSON each time an object changes, but nothing parsed is
kept. Reads are plain methods (no ``await``): call them from the event loop's thread.
"""

from __future__ import annotations

import asyncio
import builtins
import inspect
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType

from informerd.connection import Backoff
from informerd.errors import InformerdError, Timeout, invalid_field
from informerd.informers import (
    Added,
    Deleted,
    Informer,
    Reconnecting,
    Resnapshot,
    Synced,
    Updated,
    Watch,
)
from informerd.labels import label_matcher
from informerd.objects import KubeObject

_log = logging.getLogger("informerd.store")

Indexer = Callable[[KubeObject], Iterable[str]]
"""Maps an object to the values it is indexed under (client-go's ``IndexFunc``)."""
OnAdd = Callable[[KubeObject, bool], object]
"""``on_add(obj, initial)``: ``initial`` for objects of a (re)list (client-go's
``isInInitialList``). May be a coroutine function."""
OnUpdate = Callable[[KubeObject, KubeObject], object]
"""``on_update(old, new)``; called only when the resourceVersion changed."""
OnDelete = Callable[[KubeObject, bool], object]
"""``on_delete(last_known, tombstone)``: ``tombstone`` when the deletion was missed while
disconnected and the object may be stale."""

NAMESPACE_INDEX = "namespace"
"""The index every Store keeps: objects by namespace ("" for cluster-scoped ones)."""


class _Index:
    """One index: value -> keys, and key -> the values it was indexed under (to unindex)."""

    def __init__(self, name: str, function: Indexer) -> None:
        self.name = name
        self.function = function
        self.keys_by_value: dict[str, set[str]] = {}
        self.values_by_key: dict[str, tuple[str, ...]] = {}

    def values_of(self, obj: KubeObject) -> tuple[str, ...]:
        try:
            values = self.function(obj.copy())
            if isinstance(values, str):
                return (values,)
            return tuple(dict.fromkeys(values))
        except Exception:
            _log.exception(
                "indexer %r failed on %s; the object is not indexed by it", self.name, obj.key
            )
            return ()

    def put(self, key: str, obj: KubeObject) -> None:
        values = self.values_of(obj)
        old = self.values_by_key.get(key, ())
        if values == old:
            return
        self.remove(key)
        self.values_by_key[key] = values
        for value in values:
            self.keys_by_value.setdefault(value, set()).add(key)

    def remove(self, key: str) -> None:
        for value in self.values_by_key.pop(key, ()):
            keys = self.keys_by_value.get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.keys_by_value[value]


class Store:
    """A local, indexed mirror of one informer (see the module doc).

    Args:
        informer: the informer to mirror.
        indexers: extra indexes by name, each a function from an object to its index values.
            ``"namespace"`` is always there.
        on_add, on_update, on_delete: event handlers (functions or coroutine functions), called
            in order, one at a time, after the Store applied the change. A handler that raises is
            logged and the Store goes on.
        namespace: mirror only this namespace's objects ("" for all the informer has); a
            caller allowed to read one namespace mirrors its slice of a cluster-wide informer
            this way.
        buffer_size, max_batch, max_batch_bytes: the Watch stream's (see
            :meth:`Informer.watch`).
        backoff: spaces reconnect attempts.
    """

    def __init__(
        self,
        informer: Informer,
        *,
        indexers: Mapping[str, Indexer] | None = None,
        on_add: OnAdd | None = None,
        on_update: OnUpdate | None = None,
        on_delete: OnDelete | None = None,
        namespace: str = "",
        buffer_size: int = 0,
        max_batch: int = 0,
        max_batch_bytes: int = 0,
        backoff: Backoff | None = None,
    ) -> None:
        self.informer = informer
        indexers = dict(indexers or {})
        if NAMESPACE_INDEX in indexers:
            raise invalid_field(
                f"indexers[{NAMESPACE_INDEX!r}]", "the Store keeps this index itself"
            )
        for name, function in indexers.items():
            if not isinstance(name, str) or not name or not callable(function):
                raise invalid_field(
                    f"indexers[{name!r}]", "want a non-empty name and a function of an object"
                )
        self._indexes: dict[str, _Index] = {
            NAMESPACE_INDEX: _Index(NAMESPACE_INDEX, lambda o: (o.namespace,))
        }
        for name, function in indexers.items():
            self._indexes[name] = _Index(name, function)
        self._on_add = on_add
        self._on_update = on_update
        self._on_delete = on_delete
        self.namespace = namespace
        self._watch_request = (buffer_size, max_batch, max_batch_bytes, backoff)
        self._open_watch()  # checks the arguments now, as Informer.watch does
        self._items: dict[str, KubeObject] = {}
        # Between Reconnecting and the next Synced: the keys the fresh initial list brought.
        self._relisted: set[str] | None = None
        self._synced = asyncio.Event()
        self._ended = asyncio.Event()
        self._watch: Watch | None = None
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        self.reconnects = 0
        """How many times the Watch stream broke and the Store relisted."""
        self.resnapshots = 0
        """How many times the Store fell behind and the daemon re-snapshotted it."""

    # Lifecycle.

    async def start(self) -> None:
        """Starts mirroring (returns at once; see :meth:`wait_synced`). Starting a running
        Store is an error; a stopped one may be started again."""
        if self._task is not None:
            raise RuntimeError("Store.start: already running")
        self._ended.clear()
        self._error = None
        if self._items:
            # Started again after stop(): the new stream's initial objects replace the contents.
            self._relisted = set()
        self._watch = self._open_watch()
        self._task = asyncio.create_task(self._run(self._watch), name=f"store {self.informer.id}")

    async def stop(self) -> None:
        """Stops mirroring and cancels the Watch stream (the contents stay readable)."""
        if self._watch is not None:
            await self._watch.close()
        if self._task is not None:
            task, self._task = self._task, None
            if not task.done():
                task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                if not task.cancelled():
                    raise
        self._ended.set()

    async def __aenter__(self) -> Store:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def synced(self) -> bool:
        """The first initial list is in the Store (it stays true across reconnects)."""
        return self._synced.is_set()

    @property
    def error(self) -> BaseException | None:
        """What ended the Store's Watch stream (the informer was deleted, a non-retryable
        error), or None while it runs."""
        return self._error

    async def wait_synced(self, timeout_s: float = 60.0) -> None:
        """Returns once the Store holds the informer's objects; raises :class:`informerd.Timeout`
        after ``timeout_s``, or the error that ended the Store's stream."""
        if self._task is None and not self._ended.is_set():
            raise RuntimeError("Store.wait_synced: the Store is not started")
        synced = asyncio.ensure_future(self._synced.wait())
        ended = asyncio.ensure_future(self._ended.wait())
        try:
            await asyncio.wait(
                {synced, ended}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            synced.cancel()
            ended.cancel()
        if self._synced.is_set():
            return
        if self._error is not None:
            raise self._error
        if self._ended.is_set():
            raise RuntimeError("Store.wait_synced: the Store was stopped before it synced")
        raise Timeout(
            f"Store of informer {self.informer.id}: not synced within {timeout_s} s",
            reason="NOT_SYNCED",
            metadata={"informer_id": self.informer.id},
        )

    def _open_watch(self) -> Watch:
        buffer_size, max_batch, max_batch_bytes, backoff = self._watch_request
        return self.informer.watch(
            namespace=self.namespace,
            buffer_size=buffer_size,
            max_batch=max_batch,
            max_batch_bytes=max_batch_bytes,
            backoff=backoff,
        )

    # Reads.

    def get(self, key: str) -> KubeObject | None:
        """The object with ``key`` (``namespace/name`` or ``name``), or None."""
        obj = self._items.get(key)
        return None if obj is None else obj.copy()

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def keys(self) -> list[str]:
        """Every key, sorted."""
        return sorted(self._items)

    def list(
        self,
        *,
        namespace: str | None = None,
        label_selector: str = "",
        predicate: Callable[[KubeObject], bool] | None = None,
    ) -> list[KubeObject]:
        """The objects (sorted by key) in ``namespace`` (all when None), whose labels match
        ``label_selector`` (Kubernetes syntax; :class:`informerd.InvalidArgument` naming
        ``label_selector`` if it does not parse) and for which ``predicate`` is true."""
        matches = label_matcher(label_selector)
        if namespace is None:
            keys: Iterable[str] = self._items.keys()
        else:
            keys = self._indexes[NAMESPACE_INDEX].keys_by_value.get(namespace, ())
        result = []
        for key in sorted(keys):
            obj = self._items[key]
            if label_selector and not matches(obj.metadata.labels):
                continue
            view = obj.copy()
            if predicate is None or predicate(view):
                result.append(view)
        return result

    def by_index(self, index: str, value: str) -> builtins.list[KubeObject]:
        """The objects (sorted by key) indexed under ``value`` in ``index`` (client-go's
        ``ByIndex``)."""
        return [self._items[key].copy() for key in self.index_keys(index, value)]

    def index_keys(self, index: str, value: str) -> builtins.list[str]:
        """The keys (sorted) indexed under ``value`` in ``index`` (client-go's
        ``IndexKeys``)."""
        return sorted(self._index(index).keys_by_value.get(value, ()))

    def index_values(self, index: str) -> builtins.list[str]:
        """Every value of ``index`` that some object has (client-go's ``ListIndexFuncValues``)."""
        return sorted(self._index(index).keys_by_value)

    def _index(self, name: str) -> _Index:
        found = self._indexes.get(name)
        if found is None:
            raise invalid_field(
                "index", f"{name!r} is not an index of this Store (it has {sorted(self._indexes)})"
            )
        return found

    # Applying events.

    async def _run(self, watch: Watch) -> None:
        try:
            async for event in watch:
                await self._apply(event)
        except asyncio.CancelledError:
            raise
        except InformerdError as e:
            _log.warning("Store of informer %s: its Watch stream ended: %s", self.informer.id, e)
            self._error = e
        except BaseException as e:
            _log.exception("Store of informer %s failed", self.informer.id)
            self._error = e
        finally:
            self._ended.set()

    async def _apply(
        self, event: Added | Updated | Deleted | Synced | Resnapshot | Reconnecting
    ) -> None:
        if isinstance(event, Added):
            if self._relisted is not None:
                self._relisted.add(event.object.key)
            await self._put(event.object, event.initial)
        elif isinstance(event, Updated):
            await self._put(event.object, False)
        elif isinstance(event, Deleted):
            await self._remove(event.object.key, event.object, event.tombstone)
        elif isinstance(event, Synced):
            relisted, self._relisted = self._relisted, None
            if relisted is not None:
                for key in [k for k in self._items if k not in relisted]:
                    await self._remove(key, None, True)
            self._synced.set()
        elif isinstance(event, Resnapshot):
            self.resnapshots += 1
        elif isinstance(event, Reconnecting):
            self.reconnects += 1
            self._relisted = set()

    async def _put(self, obj: KubeObject, initial: bool) -> None:
        key = obj.key
        old = self._items.get(key)
        self._items[key] = obj
        for index in self._indexes.values():
            index.put(key, obj)
        if old is None:
            if self._on_add is not None:
                await self._call("on_add", self._on_add, obj.copy(), initial)
        elif old.resource_version != obj.resource_version and self._on_update is not None:
            await self._call("on_update", self._on_update, old.copy(), obj.copy())

    async def _remove(self, key: str, last: KubeObject | None, tombstone: bool) -> None:
        held = self._items.pop(key, None)
        for index in self._indexes.values():
            index.remove(key)
        final = last if last is not None else held
        if final is not None and self._on_delete is not None:
            await self._call("on_delete", self._on_delete, final.copy(), tombstone)

    async def _call(self, name: str, handler: Callable[..., object], *args: object) -> None:
        try:
            result = handler(*args)
            if inspect.isawaitable(result):
                await result
        except Exception:
            _log.exception("Store of informer %s: %s failed", self.informer.id, name)

    def __repr__(self) -> str:
        return f"<Store {self.informer.id} objects={len(self._items)} synced={self.synced}>"
