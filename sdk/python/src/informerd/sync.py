"""The blocking facade, for scripts and notebooks: the asyncio client run on a private event loop.

    with informerd.sync.Client.connect("127.0.0.1:7470") as client:
        cms = client.informers.ensure("v1", "ConfigMap", namespace="demo")
        cms.wait_for_sync(timeout_s=30)
        for obj in cms.list(label_selector="app=web"):
            print(obj.key)
        with informerd.sync.Store(cms) as store:
            store.wait_synced()
            print(store.keys())
        with cms.watch() as events:
            for event in events:
                ...

There is one implementation of every call, the asyncio one: :class:`Client` starts an event loop
on a daemon thread, creates the asyncio :class:`informerd.Client` there, and every method of
every object reached from it (``client.informers``, ``client.queues``, ``client.admin``, an
``Informer``, a :class:`Store` ...) is proxied: the call runs on that loop and the caller blocks
for its result. So methods added to the asyncio API (the queue methods, for instance) are here
without being listed. Results that have coroutine methods come back proxied too; async iterators
(``watch()``, ``list_batches()``) come back as blocking iterators; everything else (objects,
events, protos, exceptions) as is.

Every blocking call has a deadline: the call's own (each asyncio call has one, e.g.
``timeout_s``) and, as a backstop, the caller stops waiting after that deadline plus
:data:`MARGIN_S` and raises :class:`informerd.Timeout`. A blocking iterator over a Watch waits
as long as the stream lasts (a Watch has no deadline); ``close()`` it, from any thread, or leave
its ``with`` block.

Store handlers and other callbacks run on the loop's thread: they must not call this facade
(that would wait for the very thread it runs on; it raises RuntimeError instead).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import threading
from collections.abc import Callable, Coroutine, Iterator
from types import TracebackType
from typing import Any, TypeVar

from informerd.client import Client as AsyncClient
from informerd.errors import Timeout
from informerd.store import Store as AsyncStore

T = TypeVar("T")
ProxyT = TypeVar("ProxyT", bound="Proxy")

MARGIN_S = 10.0
"""How much longer than a call's own deadline the facade waits before giving up on it."""


class _LoopThread:
    """An event loop running on a daemon thread, for one facade client."""

    def __init__(self, default_timeout_s: float) -> None:
        self.default_timeout_s = default_timeout_s
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="informerd-sync", daemon=True
        )
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float | None) -> T:
        """Runs ``coroutine`` on the loop and waits for it (at most ``timeout_s``; None: as
        long as it takes)."""
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError(
                "informerd.sync: a blocking call from the SDK's event-loop thread (a Store "
                "handler?) would wait for itself; use the asyncio API there"
            )
        if self.loop.is_closed():
            coroutine.close()
            raise RuntimeError("informerd.sync: the client is closed")
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise Timeout(f"informerd.sync: no answer within {timeout_s} s") from None
        except BaseException:
            future.cancel()  # e.g. KeyboardInterrupt in a notebook
            raise

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


def _unwrap(value: Any) -> Any:
    return value._target if isinstance(value, Proxy) else value


def _has_coroutine_methods(value: object) -> bool:
    cls = type(value)
    if not cls.__module__.startswith("informerd.") or isinstance(value, BaseException):
        return False
    return any(inspect.iscoroutinefunction(getattr(cls, name, None)) for name in dir(cls))


class Proxy:
    """A blocking view of an object of the asyncio API: attribute reads pass through, method
    calls run on the facade's event loop (coroutines awaited there) with a deadline."""

    __slots__ = ("_loop", "_target")
    _loop: _LoopThread
    _target: Any

    def __init__(self, target: Any, loop: _LoopThread) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_loop", loop)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if callable(value) and not isinstance(value, type):
            return self._blocking(value)
        return self._wrap(value)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)

    def __repr__(self) -> str:
        return f"<sync {self._target!r}>"

    def __enter__(self: ProxyT) -> ProxyT:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Closes the object (``with`` calls this when it ends)."""
        self._call(self._target.close)

    def _blocking(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            return self._call(function, *args, **kwargs)

        call.__name__ = getattr(function, "__name__", "call")
        call.__doc__ = function.__doc__
        return call

    def _call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        args = tuple(_unwrap(a) for a in args)
        kwargs = {k: _unwrap(v) for k, v in kwargs.items()}

        async def invoke() -> Any:
            result = function(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
            return result

        return self._wrap(self._loop.run(invoke(), self._deadline(function, kwargs)))

    def _deadline(self, function: Callable[..., Any], kwargs: dict[str, Any]) -> float:
        """The call's own deadline (its ``timeout_s`` argument or that parameter's default,
        else the client's), plus the margin."""
        timeout = kwargs.get("timeout_s")
        if not isinstance(timeout, (int, float)):
            try:
                parameter = inspect.signature(function).parameters.get("timeout_s")
            except (TypeError, ValueError):
                parameter = None
            default = None if parameter is None else parameter.default
            timeout = default if isinstance(default, (int, float)) else None
        if timeout is None:
            timeout = self._loop.default_timeout_s
        return float(timeout) + MARGIN_S

    def _wrap(self, value: Any) -> Any:
        if hasattr(value, "__anext__"):
            return SyncIterator(value, self._loop)
        if _has_coroutine_methods(value):
            return Proxy(value, self._loop)
        return value


class SyncIterator(Proxy):
    """A blocking iterator over an async one (a Watch, a list's batches). ``close()`` (from any
    thread) or leaving ``with`` cancels the stream."""

    __slots__ = ()

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        try:
            return self._loop.run(self._target.__anext__(), None)
        except StopAsyncIteration:
            raise StopIteration from None

    def close(self) -> None:
        """Cancels the stream; a ``next()`` waiting in another thread ends (StopIteration)."""
        close = getattr(self._target, "close", None)
        if close is None or self._loop.loop.is_closed():
            return
        # Scheduled rather than awaited: this may be called while another thread waits in
        # next() or from a finalizer.
        with contextlib.suppress(RuntimeError):  # the loop stopped meanwhile
            asyncio.run_coroutine_threadsafe(close(), self._loop.loop)

    def __del__(self) -> None:
        # An iterator dropped unclosed (``for e in cms.watch(): break``): its stream is
        # cancelled on the loop's thread, where it lives.
        self.close()


class Client(Proxy):
    """A blocking :class:`informerd.Client` (see the module doc). Create with :meth:`connect`;
    close with :meth:`close` or ``with``."""

    __slots__ = ()

    @classmethod
    def connect(cls, target: str = "127.0.0.1:7470", **options: Any) -> Client:
        """As :meth:`informerd.Client.connect` (the same keywords)."""
        loop = _LoopThread(default_timeout_s=30.0)
        try:

            async def create() -> AsyncClient:
                # The channel belongs to the loop it is created on.
                return AsyncClient.connect(target, **options)

            client = loop.run(create(), MARGIN_S)
        except BaseException:
            loop.stop()
            raise
        loop.default_timeout_s = client.options.timeout_s
        return cls(client, loop)

    @property
    def asyncio_client(self) -> AsyncClient:
        """The asyncio client underneath (use it only on :attr:`loop`)."""
        client: AsyncClient = self._target
        return client

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The private event loop every call runs on."""
        return self._loop.loop

    def close(self) -> None:
        """Closes the channel and stops the event loop's thread."""
        if not self._loop.loop.is_closed():
            self._loop.run(self._target.close(), MARGIN_S)
            self._loop.stop()


class Store(Proxy):
    """A blocking :class:`informerd.Store` over an informer of a sync :class:`Client`:
    ``Store(informer, indexers=..., on_add=...)`` takes the asyncio Store's arguments; ``with``
    starts and stops it. Handlers run on the client's event-loop thread."""

    __slots__ = ()

    def __init__(self, informer: Proxy, **options: Any) -> None:
        if not isinstance(informer, Proxy):
            raise TypeError("informerd.sync.Store: want an informer of an informerd.sync.Client")
        loop = informer._loop

        async def create() -> AsyncStore:
            return AsyncStore(informer._target, **options)

        super().__init__(loop.run(create(), MARGIN_S), loop)

    def __len__(self) -> int:
        length: int = self._call(len, self._target)
        return length

    def __contains__(self, key: object) -> bool:
        found: bool = self._call(self._target.__contains__, key)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __enter__(self: ProxyT) -> ProxyT:
        self.start()
        return self

    def close(self) -> None:
        """Stops the Store (as ``stop()``)."""
        self.stop()
