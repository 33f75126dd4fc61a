"""The controller runtime: controller-runtime's Controller over informerd's queues and Work stream.

    ctl = Controller("configmap-hash", client, concurrency=4)
    ctl.for_("apps/v1", "Deployment", namespace="demo", predicates=[generation_changed()],
             indexes={"configmaps": field_index("spec.template.spec.volumes.configMap.name")})
    ctl.owns("v1", "Pod")
    ctl.watches("v1", "ConfigMap", index="configmaps", value_from="name")

    async def reconcile(obj: KubeObject | None, ctx: Context) -> Result | None:
        ...
        return Result.requeue_after(300)

    await ctl.run(reconcile, shutdown_on_signal=True)

``run`` ensures the informers (and waits for their caches, as controller-runtime waits for
``WaitForCacheSync``), creates or updates the queue (``UpdateQueue`` with ``allow_missing``), opens
the Work stream with a credit of ``concurrency`` and feeds a fixed pool of ``concurrency``
reconciler tasks. Outcomes of one loop tick go to the daemon in one message:

===========================  ==============================  ===============================
reconcile                    outcome                          ``reconcile_total{result}``
===========================  ==============================  ===============================
None / ``Result.done()``     SUCCESS                          success
``Result.requeue_after(s)``  FORGET_AND_REQUEUE_AFTER (s)     requeue_after
``Result.requeue()``         RETRY (rate-limited)             requeue
an exception                 RETRY, with the error text       error
``TerminalError``            SUCCESS (forget), with the text  error (+ terminal errors)
===========================  ==============================  ===============================

On ``stop()`` (or SIGTERM/SIGINT with ``shutdown_on_signal``) the controller sends Drain, lets
in-flight reconciles finish, sends their outcomes and returns: no key is lost. When the stream
breaks for any reason (a daemon restart, the network, keepalive noticing a frozen daemon, the
replica stepping down as leader: NOT_LEADER), every in-flight reconcile is cancelled at once
(``Task.cancel``) and the outcomes of the old stream are never sent — the daemon already gave
those keys back to the queue, or a new leader hands them out anew. The controller then
reconnects with jittered backoff, following the replica set's leader, re-ensures its informers
and queue (``Client.reensure``) and goes on.

A *sync* reconcile runs in a thread, which Python cannot interrupt: when its stream ends,
:attr:`Context.cancelled` turns true (and :meth:`Context.wait_cancelled` returns) so that it can
stop early. Until every such thread has returned, the controller takes **no new work**: it opens
no new stream, so this process never runs two reconciles of one key at once. The wait is bounded
by ``run``'s ``drain_timeout_s`` when given; ``informerd_sdk_abandoned_reconciles`` counts the
threads it waits for, and the log names their keys every 10 s. What this cannot hold: the daemon
gave the key back when the stream ended, so *another process's* worker may reconcile it while
the thread still runs. A sync reconcile that must keep exclusion across processes checks
``ctx.cancelled`` before each write (or uses the lease's token as a fencing token); an async one
is cancelled at its next ``await``.

``on_reconcile`` observes every reconcile as :class:`ReconcileEvent` s: ``start`` before the
reconcile runs, then ``end`` (it returned or raised; before its outcome is sent) or ``cancel``
(its stream broke, or a drain timed out), each with the key, the lease's token and the
stream's epoch — what a test's oracle needs to check that no key is in two reconciles at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import inspect
import logging
import os
import signal
import socket
import threading
import time
import types
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from prometheus_client import CollectorRegistry

from informerd.connection import Backoff
from informerd.errors import (
    FailedPrecondition,
    InformerdError,
    InvalidArgument,
    PermissionDenied,
    Unavailable,
)
from informerd.informers import Informer
from informerd.metrics import ControllerMetrics
from informerd.objects import KubeObject, split_key
from informerd.queues import (
    index_source,
    object_source,
    owner_source,
    queue_spec,
    validate_priority,
    validate_queue_name,
)
from informerd.v1 import informers_pb2, queues_pb2, work_pb2
from informerd.work import WorkStream, refusal_reason, validate_count

if TYPE_CHECKING:
    from informerd.client import Client

    _LoggerAdapter = logging.LoggerAdapter[logging.Logger]
else:
    _LoggerAdapter = logging.LoggerAdapter

_log = logging.getLogger("informerd.controller")


@dataclass(frozen=True)
class Result:
    """What a reconcile asks for next (controller-runtime's ``reconcile.Result``). Build with
    :meth:`done`, :meth:`requeue` or :meth:`requeue_after`; returning None means done."""

    kind: Literal["done", "requeue", "requeue_after"] = "done"
    delay_s: float = 0.0
    #: The priority the requeue waits at (controller-runtime's ``Result.Priority``); None: the
    #: priority the key was handed out at (:attr:`Context.priority`).
    priority: int | None = None

    def __post_init__(self) -> None:
        # Also for a Result built directly or with dataclasses.replace: a bad one fails the
        # reconcile where it is made (the key is retried at its own priority), never the stream.
        if self.kind not in ("done", "requeue", "requeue_after"):
            raise ValueError(f"Result: kind {self.kind!r}, want done, requeue or requeue_after")
        validate_priority(self.priority, f"Result.{self.kind}: priority")

    @classmethod
    def done(cls) -> Result:
        """Reconciled: forget the key's failures; nothing more until it changes."""
        return cls("done")

    @classmethod
    def requeue(cls, *, priority: int | None = None) -> Result:
        """Look again after the queue's rate-limited delay (counts as a retry), at
        ``priority`` (None: the key's own)."""
        return cls("requeue", priority=priority)

    @classmethod
    def requeue_after(cls, delay_s: float, *, priority: int | None = None) -> Result:
        """Reconciled; look again after ``delay_s`` seconds (earlier failures forgotten), at
        ``priority`` (None: the key's own)."""
        if isinstance(delay_s, bool) or not isinstance(delay_s, (int, float)) or delay_s < 0:
            raise ValueError(f"Result.requeue_after: delay_s {delay_s!r}, want seconds >= 0")
        return cls("requeue_after", float(delay_s), priority)


class TerminalError(Exception):
    """Raised by a reconcile that failed in a way retrying cannot fix (controller-runtime's
    ``reconcile.TerminalError``, kopf's ``PermanentError``): logged and counted, the key is
    forgotten, not retried. It comes back when its object changes."""


class ContextLogger(_LoggerAdapter):
    """A logger adapter that puts the controller, key and token on every record, both as
    ``extra`` attributes (for structured handlers) and in the message."""

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        extra = dict(self.extra or {})
        extra.update(kwargs.get("extra") or {})
        kwargs["extra"] = extra
        return f"[{extra['controller']} {extra['key']} token={extra['token']}] {msg}", kwargs


class Context:
    """What a reconcile knows besides the object: the lease and where it came from.

    Built once per lease, so it is cheap: the fields read the lease, and :attr:`logger` is made
    on first use."""

    __slots__ = (
        "_cancelled",
        "_lease",
        "_logger",
        "client",
        "controller",
        "epoch",
        "queue",
        "stream_id",
    )

    def __init__(
        self,
        lease: work_pb2.Lease,
        *,
        client: Client,
        controller: str,
        queue: str,
        epoch: int = 0,
        stream_id: str = "",
        cancelled: threading.Event | None = None,
    ):
        self._lease = lease
        self._logger: ContextLogger | None = None
        self._cancelled = cancelled
        self.client = client
        #: The controller's name.
        self.controller = controller
        self.queue = queue
        #: The epoch of the Work stream the lease came on (``Started.epoch``): a replica set's
        #: leader's term epoch, a single daemon's start time (both at least the wall clock in
        #: Unix ns). Every token of the stream is greater.
        self.epoch = epoch
        #: The daemon's id of that stream (``Started.stream_id``).
        self.stream_id = stream_id

    @property
    def key(self) -> str:
        """The queue key (``<cluster>//ns/name`` for another cluster's object)."""
        return self._lease.key

    @property
    def token(self) -> int:
        """The lease's fencing token (strictly increasing per queue)."""
        return self._lease.token

    @property
    def requeues(self) -> int:
        """How often the key was retried so far."""
        return self._lease.requeues

    @property
    def priority(self) -> int:
        """The priority the key waited at (0 unless its adds or sources named one)."""
        return self._lease.priority

    @property
    def is_in_initial_list(self) -> bool:
        """Every add the key waited for came from an informer's initial list (client-go's
        ``OnAdd(obj, isInInitialList)``): startup work, not a change."""
        return self._lease.is_in_initial_list

    @property
    def cluster(self) -> str:
        """ "" for the daemon's default cluster, else the cluster's name."""
        return self._lease.cluster

    @property
    def object_key(self) -> str:
        """The key within its cluster ("namespace/name" or "name")."""
        return self._lease.object_key or self._lease.key

    @property
    def namespace(self) -> str:
        return split_key(self.object_key)[0]

    @property
    def name(self) -> str:
        return split_key(self.object_key)[1]

    @property
    def cancelled(self) -> bool:
        """True once the Work stream this lease came on has ended: the key may be handed to
        another worker, so a sync reconcile should stop (an async one is cancelled for it).
        Safe to read from any thread."""
        return self._cancelled is not None and self._cancelled.is_set()

    def wait_cancelled(self, timeout_s: float | None = None) -> bool:
        """For sync reconciles: sleeps up to ``timeout_s`` (None: until cancelled), returning
        early with True when the reconcile is cancelled (see :attr:`cancelled`)."""
        if self._cancelled is None:
            if timeout_s is not None:
                time.sleep(timeout_s)
            return False
        return self._cancelled.wait(timeout_s)

    @property
    def logger(self) -> ContextLogger:
        """A logger whose records carry the controller, key and token."""
        if self._logger is None:
            extra = {"controller": self.controller, "key": self.key, "token": self.token}
            self._logger = ContextLogger(_log, extra)
        return self._logger

    def __repr__(self) -> str:
        return f"<Context {self.controller} {self.key} token={self.token}>"


Reconciler = Callable[[KubeObject | None, Context], Awaitable[Result | None] | Result | None]

ReconcileEventKind = Literal["start", "end", "cancel"]


@dataclass(frozen=True)
class ReconcileEvent:
    """A step of one reconcile, for :class:`Controller`'s ``on_reconcile`` hook.

    ``start``: the reconcile is about to run. ``end``: it returned or raised (``result`` is the
    ``reconcile_total`` label: success, requeue, requeue_after, error), before its outcome goes to
    the daemon. ``cancel``: it was cancelled because its Work stream ended (broke, or a drain
    timed out); a sync reconcile's thread cannot be interrupted, so its ``cancel`` comes when the
    thread returns. ``at`` is ``time.monotonic()`` when it happened."""

    kind: ReconcileEventKind
    context: Context
    at: float
    result: str = ""

    @property
    def key(self) -> str:
        return self.context.key

    @property
    def token(self) -> int:
        return self.context.token

    @property
    def epoch(self) -> int:
        return self.context.epoch

    @property
    def stream_id(self) -> str:
        return self.context.stream_id


ReconcileObserver = Callable[[ReconcileEvent], None]


@dataclass
class _Watch:
    role: Literal["for", "owns", "watches"]
    api_version: str
    kind: str
    namespace: str | None
    label_selector: str
    predicates: list[queues_pb2.Predicate]
    indexes: dict[str, informers_pb2.IndexSpec] = field(default_factory=dict)
    transform: informers_pb2.TransformSpec | None = None
    cluster: str = ""
    all_owners: bool = False
    index: str = ""
    value_from: Literal["key", "name"] = "key"
    priorities: queues_pb2.SourcePriorities | None = None


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def _checked_priorities(
    priorities: queues_pb2.SourcePriorities | None,
) -> queues_pb2.SourcePriorities | None:
    object_source("-", priorities=priorities)  # raises TypeError naming them
    return priorities


def _checked_predicates(predicates: Iterable[queues_pb2.Predicate]) -> list[queues_pb2.Predicate]:
    predicates = list(predicates)
    object_source("-", predicates=predicates)  # raises TypeError/ValueError naming them
    return predicates


def _check_gvk(api_version: str, kind: str) -> None:
    if not isinstance(api_version, str) or not api_version or api_version.count("/") > 1:
        raise ValueError(f"api_version: {api_version!r}, want 'v1' or 'group/version'")
    if not isinstance(kind, str) or not kind:
        raise ValueError("kind: required (e.g. 'Deployment')")


class _Session:
    """One Work stream's life: outcomes of reconciles started in it go to it only while alive."""

    def __init__(self, stream: WorkStream) -> None:
        self.stream = stream
        self.alive = True
        # Reconciles running now (their contexts), to say which ones a broken stream cancels.
        self.running: set[Context] = set()
        # Set when the stream ends: what sync reconciles see as Context.cancelled.
        self.cancelled = threading.Event()
        # Sync reconciles cancelled while their thread ran on, with their contexts.
        self.abandoned: list[tuple[concurrent.futures.Future[Any], Context]] = []


class _Pool:
    """Hands leases to the session's fixed pool of reconciler tasks.

    Leases wait in ``backlog``; a task that finishes a reconcile takes the next one without
    suspending. An idle task waits on its own future and is woken only when leases wait and no
    other wake is pending; a woken task that leaves leases behind wakes the next idle one. So a
    batch of reconciles that never suspend costs one or two wake-ups, and reconciles that do
    suspend still spread over the pool (one more task each loop tick)."""

    def __init__(self) -> None:
        self.idle: deque[asyncio.Future[None]] = deque()
        self.backlog: deque[work_pb2.Lease] = deque()
        self._waking = False

    def hand_out(self, leases: list[work_pb2.Lease]) -> None:
        self.backlog.extend(leases)
        self._wake_one()

    def take(self) -> work_pb2.Lease | None:
        """The next lease, or None when none waits (then :meth:`wait`)."""
        if not self.backlog:
            return None
        lease = self.backlog.popleft()
        if self.backlog:
            self._wake_one()
        return lease

    async def wait(self, loop: asyncio.AbstractEventLoop) -> None:
        waiter: asyncio.Future[None] = loop.create_future()
        self.idle.append(waiter)
        await waiter
        self._waking = False

    def _wake_one(self) -> None:
        if self._waking:
            return
        while self.idle:
            waiter = self.idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
                self._waking = True
                return


class Controller:
    """A controller: informers feeding one queue, and a fixed pool of reconcilers on it.

    ``concurrency`` is the Work stream's credit and the number of reconciler tasks (threads for
    a sync reconcile function); ``max_batch`` is the most keys per delivery (``Start.max_batch``;
    0: up to the credit). ``resync_period_s``, ``lease_timeout_s``, ``priority_aging_s`` and
    ``rate_limiter`` go into the queue's spec (None: never, never, one minute, client-go's
    default limiter); ``queue`` names
    the queue (default: ``name``). Metrics go to ``registry`` (default: prometheus_client's
    global REGISTRY). ``on_reconcile`` is called with every :class:`ReconcileEvent` (on the
    event loop; it must not block, and what it raises is logged and ignored).
    """

    def __init__(
        self,
        name: str,
        client: Client,
        *,
        concurrency: int = 1,
        max_batch: int = 0,
        resync_period_s: float | None = None,
        lease_timeout_s: float | None = None,
        priority_aging_s: float | None = None,
        rate_limiter: queues_pb2.RateLimiterSpec | None = None,
        queue: str | None = None,
        registry: CollectorRegistry | None = None,
        backoff: Backoff | None = None,
        sync_timeout_s: float = 120.0,
        on_reconcile: ReconcileObserver | None = None,
    ) -> None:
        self.name = validate_queue_name(name, "name")
        self.queue = validate_queue_name(queue if queue is not None else name, "queue")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int):
            raise TypeError(f"concurrency: want an int, got {concurrency!r}")
        if not 1 <= concurrency <= 10_000:
            raise ValueError(f"concurrency: {concurrency}, want 1 .. 10000")
        self.client = client
        self.concurrency = concurrency
        self.max_batch = validate_count(max_batch, "max_batch", 0, concurrency)
        self._resync_period_s = resync_period_s
        self._lease_timeout_s = lease_timeout_s
        self._priority_aging_s = priority_aging_s
        self._rate_limiter = rate_limiter
        # Validate the queue's arguments now, where the mistake is made.
        queue_spec(
            self.queue,
            rate_limiter=rate_limiter,
            resync_period_s=resync_period_s,
            lease_timeout_s=lease_timeout_s,
            priority_aging_s=priority_aging_s,
        )
        self._watches: list[_Watch] = []
        self.metrics = ControllerMetrics(self.name, registry)
        self.metrics.max_concurrent.set(concurrency)
        self._backoff = backoff or Backoff()
        self._sync_timeout_s = sync_timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._stop_requested = False
        self._informers: list[Informer] = []
        self.for_informer: Informer | None = None
        self.log = ContextLogger(_log, {"controller": self.name, "key": "-", "token": 0})
        #: Work streams opened so far (1 + reconnects).
        self.streams_opened = 0
        #: Called with every :class:`ReconcileEvent` (None: nothing observes reconciles).
        self.on_reconcile = on_reconcile

    # --- what the controller watches -----------------------------------------------------

    @property
    def _for(self) -> _Watch | None:
        return next((w for w in self._watches if w.role == "for"), None)

    def for_(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str = "",
        label_selector: str = "",
        predicates: Iterable[queues_pb2.Predicate] = (),
        indexes: Mapping[str, informers_pb2.IndexSpec] | None = None,
        transform: informers_pb2.TransformSpec | None = None,
        cluster: str = "",
        priorities: queues_pb2.SourcePriorities | None = None,
    ) -> Controller:
        """The reconciled kind: its objects' own keys are the queue's keys, and every lease
        carries the object (``namespace`` "" = all). ``indexes`` are built on its informer (for
        :meth:`watches`). ``priorities`` (:func:`informerd.queues.source_priorities`) rank its
        adds, e.g. the initial list below changes. Once per controller."""
        _check_gvk(api_version, kind)
        if self._for is not None:
            raise ValueError("for_: already called (a controller reconciles one kind)")
        predicates = _checked_predicates(predicates)
        self._watches.append(
            _Watch(
                "for",
                api_version,
                kind,
                namespace,
                label_selector,
                predicates,
                dict(indexes or {}),
                transform,
                cluster,
                priorities=_checked_priorities(priorities),
            )
        )
        return self

    def owns(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str = "",
        predicates: Iterable[queues_pb2.Predicate] = (),
        all_owners: bool = False,
        priorities: queues_pb2.SourcePriorities | None = None,
    ) -> Controller:
        """Objects of this kind enqueue their controller owner of the ``for_`` kind (every owner
        of that kind with ``all_owners``). ``namespace`` defaults to the ``for_`` namespace."""
        _check_gvk(api_version, kind)
        self._watches.append(
            _Watch(
                "owns", api_version, kind, namespace, label_selector,
                _checked_predicates(predicates),
                all_owners=all_owners, priorities=_checked_priorities(priorities),
            )
        )  # fmt: skip
        return self

    def watches(
        self,
        api_version: str,
        kind: str,
        *,
        index: str,
        value_from: Literal["key", "name"] = "key",
        namespace: str | None = None,
        label_selector: str = "",
        predicates: Iterable[queues_pb2.Predicate] = (),
        priorities: queues_pb2.SourcePriorities | None = None,
    ) -> Controller:
        """Objects of this kind enqueue the ``for_`` objects whose index ``index`` (one of
        ``for_``'s ``indexes``) holds their key (``value_from="key"``) or name (``"name"``)."""
        _check_gvk(api_version, kind)
        predicates = _checked_predicates(predicates)
        index_source("-", index_informer="-", index_name=index, value_from=value_from)
        self._watches.append(
            _Watch(
                "watches", api_version, kind, namespace, label_selector, predicates,
                index=index, value_from=value_from,
                priorities=_checked_priorities(priorities),
            )
        )  # fmt: skip
        return self

    # --- setting up ----------------------------------------------------------------------

    async def _ensure(self) -> queues_pb2.QueueSpec:
        main = self._for
        if main is None:
            raise ValueError(f"Controller {self.name}: call for_() before run()")
        for w in self._watches:
            if w.role == "watches" and w.index not in main.indexes:
                raise ValueError(
                    f"watches({w.api_version}, {w.kind}): index {w.index!r} is not one of "
                    f"for_'s indexes {sorted(main.indexes)}"
                )
        informers = self.client.informers
        self._informers = []
        sources = []
        for_informer: Informer | None = None
        for w in sorted(self._watches, key=lambda w: w.role != "for"):
            namespace = w.namespace if w.namespace is not None else (main.namespace or "")
            informer = await informers.ensure(
                w.api_version,
                w.kind,
                namespace=namespace,
                indexes=w.indexes or None,
                transform=w.transform,
                cluster=w.cluster if w.role == "for" else main.cluster,
            )
            self._informers.append(informer)
            if w.role == "for":
                for_informer = informer
                sources.append(
                    object_source(
                        informer,
                        label_selector=w.label_selector,
                        predicates=w.predicates,
                        priorities=w.priorities,
                    )
                )
            elif w.role == "owns":
                sources.append(
                    owner_source(
                        informer,
                        main.kind,
                        group=_group(main.api_version),
                        all_owners=w.all_owners,
                        label_selector=w.label_selector,
                        predicates=w.predicates,
                        priorities=w.priorities,
                    )
                )
            else:
                assert for_informer is not None
                sources.append(
                    index_source(
                        informer,
                        index_informer=for_informer,
                        index_name=w.index,
                        value_from=w.value_from,
                        label_selector=w.label_selector,
                        predicates=w.predicates,
                        priorities=w.priorities,
                    )
                )
        self.for_informer = for_informer
        await self._wait_for_sync()
        spec = queue_spec(
            self.queue,
            sources,
            rate_limiter=self._rate_limiter,
            resync_period_s=self._resync_period_s,
            lease_timeout_s=self._lease_timeout_s,
            priority_aging_s=self._priority_aging_s,
        )
        await self.client.queues.update(spec, allow_missing=True)
        return spec

    async def _wait_for_sync(self) -> None:
        for informer in self._informers:
            await informer.wait_for_sync(timeout_s=self._sync_timeout_s)

    # --- running -------------------------------------------------------------------------

    def stop(self) -> None:
        """Asks :meth:`run` to drain and return (thread-safe; before run: run returns at once)."""
        self._stop_requested = True
        loop, event = self._loop, self._stop_event
        if loop is None or event is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            event.set()
        else:
            loop.call_soon_threadsafe(event.set)

    @property
    def stopping(self) -> bool:
        return self._stop_requested

    async def _sleep_unless_stopped(self, delay_s: float) -> None:
        assert self._stop_event is not None
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stop_event.wait(), delay_s)

    async def run(
        self,
        reconcile: Reconciler,
        *,
        shutdown_on_signal: bool = False,
        drain_timeout_s: float | None = None,
    ) -> None:
        """Reconciles until :meth:`stop` (or SIGTERM/SIGINT with ``shutdown_on_signal``), then
        drains: in-flight reconciles finish (at most ``drain_timeout_s`` when given, after which
        they are cancelled and their keys go back to the queue) and their outcomes are sent.

        Bad definitions raise at once (ValueError for the controller's arguments, the daemon's
        error, e.g. :class:`informerd.NotFound` for an unknown kind); an unreachable daemon is
        retried with backoff."""
        if not callable(reconcile):
            raise TypeError(f"reconcile: {reconcile!r} is not callable")
        if self._for is None:
            raise ValueError(f"Controller {self.name}: call for_() before run()")
        is_async = inspect.iscoroutinefunction(reconcile) or inspect.iscoroutinefunction(
            getattr(reconcile, "__call__", None)  # noqa: B004
        )
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        if self._stop_requested:  # stop() came before run()
            self._stop_requested = False
            self._loop = self._stop_event = None
            return
        signals: list[signal.Signals] = []
        if shutdown_on_signal:
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    self._loop.add_signal_handler(sig, self._on_signal, sig)
                    signals.append(sig)
                except (NotImplementedError, RuntimeError, ValueError) as e:
                    self.log.warning("cannot handle signal %s here: %s", sig, e)
        executor = (
            None
            if is_async
            else concurrent.futures.ThreadPoolExecutor(
                self.concurrency, thread_name_prefix=f"reconcile-{self.name}"
            )
        )
        try:
            await self._run(reconcile, executor, drain_timeout_s)
        finally:
            for sig in signals:
                self._loop.remove_signal_handler(sig)
            if executor is not None:
                executor.shutdown(wait=False, cancel_futures=True)
            self._loop = None
            self._stop_event = None
            self._stop_requested = False  # the controller may run again

    def _on_signal(self, sig: signal.Signals) -> None:
        self.log.info("%s: draining", sig.name)
        self.stop()

    async def _run(
        self,
        reconcile: Reconciler,
        executor: concurrent.futures.ThreadPoolExecutor | None,
        drain_timeout_s: float | None,
    ) -> None:
        while True:
            try:
                if not await self._unless_stopped(self._ensure()):
                    return
                break
            except Unavailable as e:
                delay = self._backoff.next()
                self.log.warning("informerd unavailable (%s); retrying in %.1f s", e, delay)
                await self._sleep_unless_stopped(delay)
                if self._stop_requested:
                    return
        lost = False
        while not self._stop_requested:
            try:
                if lost and not await self._unless_stopped(self._reensure()):
                    return
                if await self._session(reconcile, executor, drain_timeout_s):
                    return
            except (InvalidArgument, PermissionDenied):
                raise
            except InformerdError as e:
                if self._stop_requested:
                    return
                lost = True
                self.metrics.reconnects.inc()
                delay = self._backoff.next()
                self.log.warning(
                    "work stream on %s lost (%s); reconnecting in %.1f s", self.queue, e, delay
                )
                await self._sleep_unless_stopped(delay)

    async def _reensure(self) -> None:
        await self.client.reensure()
        await self._wait_for_sync()

    async def _unless_stopped(self, step: Awaitable[object]) -> bool:
        """Runs ``step``; False (``step`` cancelled) if the controller is stopped first."""
        assert self._stop_event is not None
        task = asyncio.ensure_future(step)
        stopped = asyncio.ensure_future(self._stop_event.wait())
        try:
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if task.cancelled():
            return False
        task.result()
        return True

    def _worker_name(self) -> str:
        return f"{self.name}@{socket.gethostname()}/{os.getpid()}"

    async def _session(
        self,
        reconcile: Reconciler,
        executor: concurrent.futures.ThreadPoolExecutor | None,
        drain_timeout_s: float | None,
    ) -> bool:
        """Runs one Work stream; True when it ended by a drain (or a stop), else raises."""
        assert self.for_informer is not None
        assert self._stop_event is not None
        stream = WorkStream(
            self.client,
            self.queue,
            max_in_flight=self.concurrency,
            max_batch=self.max_batch,
            worker_name=self._worker_name(),
            object_informer_id=self.for_informer.id,
            on_refusal=lambda r: self.metrics.refused(refusal_reason(r)),
            logger=_log,
        )
        session = _Session(stream)
        try:
            await stream.start()
        except BaseException:
            await stream.close()
            raise
        self.streams_opened += 1
        self._backoff.reset()
        self.log.info(
            "work stream on %s started (epoch %d, credit %d)",
            self.queue,
            stream.epoch,
            self.concurrency,
        )
        pool = _Pool()
        workers = [
            asyncio.create_task(
                self._worker(session, pool, reconcile, executor), name=f"{self.name} worker {i}"
            )
            for i in range(self.concurrency)
        ]
        stopper = asyncio.create_task(self._drain_on_stop(stream, drain_timeout_s))
        ended: BaseException | None = None
        try:
            while (batch := await stream.receive()) is not None:
                pool.hand_out(batch)
            self.log.info("work stream on %s drained", self.queue)
            return True
        except InformerdError as e:
            ended = e
            if self._stop_requested:
                self.log.warning("work stream on %s ended while draining", self.queue)
                return True
            raise
        except BaseException as e:
            ended = e
            raise
        finally:
            # Whatever ended the stream, its reconciles stop now: their keys are no longer
            # theirs (the daemon gave them back, or a new leader hands them out), and their
            # outcomes are never sent (session.alive).
            session.alive = False
            session.cancelled.set()
            stopper.cancel()
            for w in workers:
                w.cancel()
            if session.running:
                self.log.warning(
                    "work stream on %s (epoch %d) ended (%s): cancelled %d in-flight "
                    "reconciles: %s",
                    self.queue,
                    stream.epoch,
                    ended if ended is not None else "closed",
                    len(session.running),
                    " ".join(sorted(f"{c.key}@{c.token}" for c in session.running)),
                )
            await asyncio.gather(*workers, stopper, return_exceptions=True)
            await stream.close()
            self.metrics.flush()
            await self._await_abandoned(session, drain_timeout_s)

    async def _await_abandoned(self, session: _Session, bound_s: float | None) -> None:
        """Waits until the threads of the sync reconciles this session cancelled have returned
        (at most ``bound_s``), so that no new work is taken while they still run."""
        running = [(f, c) for f, c in session.abandoned if not f.done()]
        if not running:
            return
        gauge = self.metrics.abandoned
        gauge.inc(len(running))
        waits = {asyncio.wrap_future(f): c for f, c in running}
        deadline = None if bound_s is None else time.monotonic() + bound_s
        try:
            while waits:
                keys = " ".join(sorted(f"{c.key}@{c.token}" for c in waits.values()))
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    self.log.error(
                        "%d cancelled sync reconciles still run after %.1f s; taking new work "
                        "anyway (they may overlap with new reconciles of their keys): %s",
                        len(waits),
                        bound_s,
                        keys,
                    )
                    return
                self.log.warning(
                    "waiting for %d cancelled sync reconciles to return before taking new work: %s",
                    len(waits),
                    keys,
                )
                done, _ = await asyncio.wait(
                    waits, timeout=10.0 if left is None else min(left, 10.0)
                )
                for d in done:
                    del waits[d]
                    gauge.dec()
        finally:
            gauge.dec(len(waits))
            for w in waits:
                w.cancel()

    async def _drain_on_stop(self, stream: WorkStream, drain_timeout_s: float | None) -> None:
        assert self._stop_event is not None
        await self._stop_event.wait()
        stream.drain()
        if drain_timeout_s is not None:
            await asyncio.sleep(drain_timeout_s)
            self.log.warning("drain took over %.1f s: cancelling reconciles", drain_timeout_s)
            await stream.close()

    async def _worker(
        self,
        session: _Session,
        pool: _Pool,
        reconcile: Reconciler,
        executor: concurrent.futures.ThreadPoolExecutor | None,
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            lease = pool.take()
            if lease is None:
                await pool.wait(loop)
            else:
                await self._reconcile_one(session, lease, reconcile, executor)

    async def _reconcile_one(
        self,
        session: _Session,
        lease: work_pb2.Lease,
        reconcile: Reconciler,
        executor: concurrent.futures.ThreadPoolExecutor | None,
    ) -> None:
        obj = KubeObject(lease.object.object) if lease.object.found else None
        stream = session.stream
        ctx = Context(
            lease,
            client=self.client,
            controller=self.name,
            queue=self.queue,
            epoch=stream.epoch,
            stream_id=stream.stream_id,
            cancelled=session.cancelled,
        )
        m = self.metrics
        m.active += 1
        session.running.add(ctx)
        observe = self.on_reconcile
        if observe is not None:
            self._observe(observe, "start", ctx)
        started = time.perf_counter()
        result = _SUCCESS
        delay_s = 0.0
        priority: int | None = None
        error = ""
        label = "success"
        thread: concurrent.futures.Future[Any] | None = None
        try:
            if executor is not None:
                call = functools.partial(contextvars.copy_context().run, reconcile, obj, ctx)
                thread = executor.submit(call)
                value = await asyncio.wrap_future(thread)
            else:
                value = reconcile(obj, ctx)
            if type(value) is types.CoroutineType or inspect.isawaitable(value):
                value = await value
            if value is None:
                pass
            elif not isinstance(value, Result):
                raise TypeError(f"reconcile returned {value!r}, want a Result or None")
            elif value.kind == "requeue":
                result, label = _RETRY, "requeue"
                priority = value.priority
            elif value.kind == "requeue_after":
                result, label = _FORGET_AND_REQUEUE_AFTER, "requeue_after"
                delay_s = value.delay_s
                priority = value.priority
        except asyncio.CancelledError:
            ctx.logger.info("reconcile cancelled: the work stream ended")
            running_on = thread is not None and not thread.cancel()
            if running_on:
                # The thread runs on; the session waits for it before new work is taken.
                assert thread is not None
                session.abandoned.append((thread, ctx))
            if observe is not None:
                if running_on:
                    # Its reconcile ends when the thread returns.
                    assert thread is not None
                    loop = asyncio.get_running_loop()
                    thread.add_done_callback(
                        lambda _: self._observe_threadsafe(loop, observe, "cancel", ctx)
                    )
                else:
                    self._observe(observe, "cancel", ctx)
            raise
        except TerminalError as e:
            error = f"terminal: {type(e).__name__}: {e}"
            label = "error"
            m.reconcile_errors.inc()
            m.terminal_errors.inc()
            ctx.logger.error("Reconciler error (terminal, not retried): %s", e, exc_info=True)
        except Exception as e:
            result, label = _RETRY, "error"
            error = f"{type(e).__name__}: {e}"
            m.reconcile_errors.inc()
            ctx.logger.error("Reconciler error: %s", e, exc_info=True)
        finally:
            m.active -= 1
            session.running.discard(ctx)
        m.reconciled(label, time.perf_counter() - started)
        if observe is not None:
            self._observe(observe, "end", ctx, label)
        if not session.alive:
            ctx.logger.info("outcome dropped: the work stream it came from ended")
            return
        try:
            session.stream.complete(
                lease, result, requeue_after_s=delay_s, error=error, priority=priority
            )
        except FailedPrecondition:
            ctx.logger.info("outcome dropped: the work stream was closed")

    def _observe(
        self, observe: ReconcileObserver, kind: ReconcileEventKind, ctx: Context, result: str = ""
    ) -> None:
        try:
            observe(ReconcileEvent(kind, ctx, time.monotonic(), result))
        except Exception:
            ctx.logger.exception("on_reconcile raised (ignored)")

    def _observe_threadsafe(
        self,
        loop: asyncio.AbstractEventLoop,
        observe: ReconcileObserver,
        kind: ReconcileEventKind,
        ctx: Context,
    ) -> None:
        at = time.monotonic()

        def emit() -> None:
            try:
                observe(ReconcileEvent(kind, ctx, at))
            except Exception:
                ctx.logger.exception("on_reconcile raised (ignored)")

        try:
            loop.call_soon_threadsafe(emit)
        except RuntimeError:  # the loop closed meanwhile
            emit()


_SUCCESS = work_pb2.Outcome.SUCCESS
_RETRY = work_pb2.Outcome.RETRY
_FORGET_AND_REQUEUE_AFTER = work_pb2.Outcome.FORGET_AND_REQUEUE_AFTER


__all__ = [
    "Context",
    "ContextLogger",
    "Controller",
    "ReconcileEvent",
    "ReconcileEventKind",
    "ReconcileObserver",
    "Reconciler",
    "Result",
    "TerminalError",
]
