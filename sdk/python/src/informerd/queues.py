"""The queue API: client-go workqueues kept in the daemon, fed by informer bindings.

    cms = await client.informers.ensure("v1", "ConfigMap", namespace="demo")
    spec = queue_spec("cm-hash", [object_source(cms, predicates=[generation_changed()])],
                      rate_limiter=exponential(5, 60_000))
    await client.queues.create(spec)
    await client.queues.add("cm-hash", "demo/settings")

:func:`queue_spec` canonicalizes what it builds (sources and predicates sorted, duplicates
dropped, the default rate limiter spelled out), so two processes that mean the same queue send
equal specs and ``CreateQueue`` is idempotent between them. Bad arguments raise ``ValueError`` or
``TypeError`` naming the argument before anything is sent.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal

from informerd.informers import Informer
from informerd.v1 import queues_pb2

if TYPE_CHECKING:
    from informerd.client import Client

_QUEUE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_MAX_KEY_BYTES = 1024
_MAX_FIELD_PATHS = 32


# --- predicates -----------------------------------------------------------------------------


def generation_changed() -> queues_pb2.Predicate:
    """Updates pass when metadata.generation changed (the spec changed; status writes do not
    change it). controller-runtime's GenerationChangedPredicate."""
    return queues_pb2.Predicate(generation_changed=queues_pb2.GenerationChanged())


def labels_changed() -> queues_pb2.Predicate:
    """Updates pass when metadata.labels changed (LabelChangedPredicate)."""
    return queues_pb2.Predicate(labels_changed=queues_pb2.LabelsChanged())


def annotations_changed() -> queues_pb2.Predicate:
    """Updates pass when metadata.annotations changed (AnnotationChangedPredicate)."""
    return queues_pb2.Predicate(annotations_changed=queues_pb2.AnnotationsChanged())


def fields_changed(*paths: str) -> queues_pb2.Predicate:
    """Updates pass when the value at any of these field paths changed (index syntax: dotted,
    arrays walked, e.g. ``spec.replicas``, ``metadata.finalizers``); 1 .. 32 paths."""
    if not paths:
        raise ValueError("fields_changed: give at least one field path")
    for p in paths:
        if not isinstance(p, str):
            raise TypeError(f"fields_changed: path {p!r} is not a string")
        if not p or p.startswith(".") or p.endswith(".") or ".." in p:
            raise ValueError(f"fields_changed: path {p!r} is not a dotted field path")
    unique = sorted(set(paths))
    if len(unique) > _MAX_FIELD_PATHS:
        raise ValueError(f"fields_changed: {len(unique)} paths, at most {_MAX_FIELD_PATHS}")
    return queues_pb2.Predicate(fields_changed=queues_pb2.FieldsChanged(field_paths=unique))


def _predicates(predicates: Iterable[queues_pb2.Predicate]) -> list[queues_pb2.Predicate]:
    if isinstance(predicates, queues_pb2.Predicate):
        predicates = [predicates]
    out: dict[bytes, queues_pb2.Predicate] = {}
    for p in predicates:
        if not isinstance(p, queues_pb2.Predicate):
            raise TypeError(
                f"predicates: {p!r} is not a Predicate (use generation_changed(), "
                "labels_changed(), annotations_changed() or fields_changed(...))"
            )
        if p.WhichOneof("kind") is None:
            raise ValueError("predicates: an empty Predicate (no kind set)")
        canon = queues_pb2.Predicate()
        canon.CopyFrom(p)
        if canon.HasField("fields_changed"):
            paths = sorted(set(canon.fields_changed.field_paths))
            del canon.fields_changed.field_paths[:]
            canon.fields_changed.field_paths.extend(paths)
        out[canon.SerializeToString(deterministic=True)] = canon
    return [out[k] for k in sorted(out)]


# --- sources --------------------------------------------------------------------------------


def _informer_id(informer: Informer | str, argument: str) -> str:
    if isinstance(informer, Informer):
        return informer.id
    if isinstance(informer, str):
        if not informer:
            raise ValueError(f"{argument}: empty informer id")
        return informer
    raise TypeError(f"{argument}: want an Informer or an informer id, got {type(informer)!r}")


#: The priorities a client may name (``AddRequest.priority``); higher is handed out first.
MIN_PRIORITY = -1_000_000
MAX_PRIORITY = 1_000_000


def validate_priority(priority: int | None, argument: str = "priority") -> int | None:
    """``priority`` if it is None or an int in MIN_PRIORITY..MAX_PRIORITY, else raises
    TypeError/ValueError naming ``argument`` (what the daemon would refuse)."""
    if priority is None:
        return None
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"{argument}: want an int, got {priority!r}")
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise ValueError(f"{argument}: must be in {MIN_PRIORITY}..{MAX_PRIORITY}, got {priority}")
    return priority


#: controller-runtime's ``priorityqueue.LowPriority``: what it gives the initial list and
#: unchanged resyncs (see :func:`source_priorities`).
LOW_PRIORITY = -100


def source_priorities(
    *,
    initial_list: int | None = None,
    unchanged: int | None = None,
    changed: int | None = None,
) -> queues_pb2.SourcePriorities:
    """The priorities of a source's adds (``QueueSource.priorities``): ``initial_list`` for the
    objects of the informer's initial list (and every object when the source is bound),
    ``unchanged`` for resyncs of objects that did not change, ``changed`` for every other add
    (None: 0; the other two default to ``changed``). controller-runtime's default is
    ``source_priorities(initial_list=LOW_PRIORITY, unchanged=LOW_PRIORITY)``; the queue's aging
    (``queue_spec(priority_aging_s=)``) bounds how long a low priority waits."""
    return queues_pb2.SourcePriorities(
        initial_list=validate_priority(initial_list, "initial_list"),
        unchanged=validate_priority(unchanged, "unchanged"),
        changed=validate_priority(changed, "changed"),
    )


def _source(
    informer: Informer | str,
    label_selector: str,
    predicates: Iterable[queues_pb2.Predicate],
    priorities: queues_pb2.SourcePriorities | None = None,
) -> queues_pb2.QueueSource:
    if not isinstance(label_selector, str):
        raise TypeError("label_selector: want a string")
    if priorities is not None and not isinstance(priorities, queues_pb2.SourcePriorities):
        raise TypeError("priorities: want source_priorities(...)")
    return queues_pb2.QueueSource(
        informer_id=_informer_id(informer, "informer"),
        label_selector=label_selector,
        predicates=_predicates(predicates),
        priorities=priorities,
    )


def object_source(
    informer: Informer | str,
    *,
    label_selector: str = "",
    predicates: Iterable[queues_pb2.Predicate] = (),
    priorities: queues_pb2.SourcePriorities | None = None,
) -> queues_pb2.QueueSource:
    """Each event's object enqueues its own key (controller-runtime's ``For``)."""
    source = _source(informer, label_selector, predicates, priorities)
    source.object.SetInParent()
    return source


def owner_source(
    informer: Informer | str,
    kind: str,
    *,
    group: str | None = None,
    all_owners: bool = False,
    label_selector: str = "",
    predicates: Iterable[queues_pb2.Predicate] = (),
    priorities: queues_pb2.SourcePriorities | None = None,
) -> queues_pb2.QueueSource:
    """Each event's object enqueues the key of its controller owner of ``kind`` (and ``group``,
    "" for the core group; None: any group), or of every such owner with ``all_owners``
    (controller-runtime's ``Owns`` / ``EnqueueRequestForOwner``)."""
    if not isinstance(kind, str) or not kind:
        raise ValueError("kind: the owner's kind is required (e.g. 'ReplicaSet')")
    if group is not None and not isinstance(group, str):
        raise TypeError("group: want a string or None")
    source = _source(informer, label_selector, predicates, priorities)
    source.owner.kind = kind
    if group is not None:
        source.owner.group = group
    source.owner.all_owners = bool(all_owners)
    return source


def index_source(
    informer: Informer | str,
    *,
    index_informer: Informer | str,
    index_name: str,
    value_from: Literal["key", "name"] = "key",
    label_selector: str = "",
    predicates: Iterable[queues_pb2.Predicate] = (),
    priorities: queues_pb2.SourcePriorities | None = None,
) -> queues_pb2.QueueSource:
    """Each event's object enqueues the keys of ``index_informer``'s objects whose index
    ``index_name`` holds the event object's key (``value_from="key"``) or name (``"name"``),
    e.g. the Deployments that mount a changed ConfigMap."""
    if not isinstance(index_name, str) or not index_name:
        raise ValueError("index_name: required (an index of index_informer)")
    values = {"key": queues_pb2.IndexLookup.KEY, "name": queues_pb2.IndexLookup.NAME}
    if value_from not in values:
        raise ValueError(f"value_from: {value_from!r}, want 'key' or 'name'")
    source = _source(informer, label_selector, predicates, priorities)
    source.index.informer_id = _informer_id(index_informer, "index_informer")
    source.index.index_name = index_name
    source.index.value_from = values[value_from]
    return source


# --- rate limiters --------------------------------------------------------------------------


def _ms(value: float, argument: str, minimum: float = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise TypeError(f"{argument}: want a number of milliseconds, got {value!r}")
    if value < minimum:
        raise ValueError(f"{argument}: {value} is below {minimum}")
    return int(value)


def _seconds_ms(value: float, argument: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise TypeError(f"{argument}: want a number of seconds, got {value!r}")
    if value < 0:
        raise ValueError(f"{argument}: {value} is negative")
    return int(value * 1000)


def default_controller() -> queues_pb2.RateLimiterSpec:
    """client-go's DefaultControllerRateLimiter (also what an unset limiter means)."""
    return queues_pb2.RateLimiterSpec(default_controller=queues_pb2.DefaultControllerLimiter())


def exponential(base_delay_ms: float, max_delay_ms: float) -> queues_pb2.RateLimiterSpec:
    """``base_delay_ms * 2^failures``, at most ``max_delay_ms``."""
    base = _ms(base_delay_ms, "base_delay_ms", 1)
    top = _ms(max_delay_ms, "max_delay_ms", 1)
    if top < base:
        raise ValueError(f"max_delay_ms: {top} is below base_delay_ms {base}")
    return queues_pb2.RateLimiterSpec(
        exponential=queues_pb2.ExponentialLimiter(base_delay_ms=base, max_delay_ms=top)
    )


def fast_slow(
    fast_delay_ms: float, slow_delay_ms: float, max_fast_attempts: int
) -> queues_pb2.RateLimiterSpec:
    """``fast_delay_ms`` for the first ``max_fast_attempts`` failures, then ``slow_delay_ms``."""
    if isinstance(max_fast_attempts, bool) or not isinstance(max_fast_attempts, int):
        raise TypeError("max_fast_attempts: want an int")
    if max_fast_attempts < 0:
        raise ValueError(f"max_fast_attempts: {max_fast_attempts} is negative")
    return queues_pb2.RateLimiterSpec(
        fast_slow=queues_pb2.FastSlowLimiter(
            fast_delay_ms=_ms(fast_delay_ms, "fast_delay_ms"),
            slow_delay_ms=_ms(slow_delay_ms, "slow_delay_ms"),
            max_fast_attempts=max_fast_attempts,
        )
    )


def bucket(qps: float, burst: int) -> queues_pb2.RateLimiterSpec:
    """A token bucket shared by all keys: ``qps`` per second, ``burst`` at once."""
    if isinstance(qps, bool) or not isinstance(qps, (int, float)) or not qps > 0:
        raise ValueError(f"qps: {qps!r}, want a positive number")
    if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
        raise ValueError(f"burst: {burst!r}, want a positive int")
    return queues_pb2.RateLimiterSpec(bucket=queues_pb2.BucketLimiter(qps=float(qps), burst=burst))


def max_of(*limiters: queues_pb2.RateLimiterSpec) -> queues_pb2.RateLimiterSpec:
    """The longest delay of several limiters (client-go's MaxOfRateLimiter)."""
    if not limiters:
        raise ValueError("max_of: give at least one limiter")
    canon = {}
    for limiter in limiters:
        c = _rate_limiter(limiter, "max_of")
        canon[c.SerializeToString(deterministic=True)] = c
    return queues_pb2.RateLimiterSpec(
        max_of=queues_pb2.MaxOfLimiter(limiters=[canon[k] for k in sorted(canon)])
    )


def _rate_limiter(
    limiter: queues_pb2.RateLimiterSpec, argument: str = "rate_limiter"
) -> queues_pb2.RateLimiterSpec:
    if not isinstance(limiter, queues_pb2.RateLimiterSpec):
        raise TypeError(f"{argument}: {limiter!r} is not a RateLimiterSpec")
    kind = limiter.WhichOneof("kind")
    if kind is None:
        raise ValueError(f"{argument}: an empty RateLimiterSpec (no kind set)")
    if kind == "max_of":
        if not limiter.max_of.limiters:
            raise ValueError(f"{argument}: max_of without limiters")
        return max_of(*limiter.max_of.limiters)
    out = queues_pb2.RateLimiterSpec()
    out.CopyFrom(limiter)
    return out


# --- specs ----------------------------------------------------------------------------------


def validate_queue_name(name: str, argument: str = "name") -> str:
    """Returns ``name`` if it is a valid queue name, else raises ValueError naming ``argument``."""
    if not isinstance(name, str):
        raise TypeError(f"{argument}: want a string, got {type(name)!r}")
    if len(name) > 253 or not _QUEUE_NAME.match(name):
        raise ValueError(
            f"{argument}: {name!r} is not a queue name ([a-z0-9]([-a-z0-9.]*[a-z0-9])?, "
            "at most 253 characters)"
        )
    return name


def queue_spec(
    name: str,
    sources: Iterable[queues_pb2.QueueSource] = (),
    *,
    rate_limiter: queues_pb2.RateLimiterSpec | None = None,
    resync_period_s: float | None = None,
    lease_timeout_s: float | None = None,
    priority_aging_s: float | None = None,
) -> queues_pb2.QueueSpec:
    """A canonical QueueSpec: equal intents give equal specs (sources and predicates in a fixed
    order without duplicates; ``rate_limiter=None`` spelled :func:`default_controller`, as the
    daemon reports it). ``resync_period_s``: None/0 never, else at least 1;
    ``lease_timeout_s``: None/0 never, else 1 .. 86400; ``priority_aging_s``: how long a key
    waits at most before it goes ahead of higher priorities, None/0 one minute, else
    1 .. 86400."""
    spec = queues_pb2.QueueSpec(name=validate_queue_name(name))
    if isinstance(sources, queues_pb2.QueueSource):
        sources = [sources]
    canon: dict[bytes, queues_pb2.QueueSource] = {}
    for i, s in enumerate(sources):
        if not isinstance(s, queues_pb2.QueueSource):
            raise TypeError(
                f"sources[{i}]: {s!r} is not a QueueSource (use object_source, owner_source "
                "or index_source)"
            )
        if not s.informer_id:
            raise ValueError(f"sources[{i}]: no informer_id")
        c = queues_pb2.QueueSource()
        c.CopyFrom(s)
        if c.WhichOneof("map_to") is None:
            c.object.SetInParent()
        preds = _predicates(c.predicates)
        del c.predicates[:]
        c.predicates.extend(preds)
        canon[c.SerializeToString(deterministic=True)] = c
    spec.sources.extend(canon[k] for k in sorted(canon))
    # The daemon reports an unset limiter as default_controller: so does the canonical spec.
    spec.rate_limiter.CopyFrom(
        default_controller() if rate_limiter is None else _rate_limiter(rate_limiter)
    )
    if resync_period_s:
        ms = _seconds_ms(resync_period_s, "resync_period_s")
        if ms < 1000:
            raise ValueError(f"resync_period_s: {resync_period_s}, want 0/None or at least 1")
        spec.resync_period_ms = ms
    if lease_timeout_s:
        ms = _seconds_ms(lease_timeout_s, "lease_timeout_s")
        if not 1000 <= ms <= 86_400_000:
            raise ValueError(f"lease_timeout_s: {lease_timeout_s}, want 0/None or 1 .. 86400")
        spec.lease_timeout_ms = ms
    if priority_aging_s:
        ms = _seconds_ms(priority_aging_s, "priority_aging_s")
        if not 1000 <= ms <= 86_400_000:
            raise ValueError(f"priority_aging_s: {priority_aging_s}, want 0/None or 1 .. 86400")
        spec.priority_aging_ms = ms
    return spec


def _keys(keys: str | Iterable[str]) -> list[str]:
    out = [keys] if isinstance(keys, str) else list(keys)
    for k in out:
        if not isinstance(k, str):
            raise TypeError(f"keys: {k!r} is not a string")
        if not k or len(k.encode()) > _MAX_KEY_BYTES:
            raise ValueError(f"keys: {k!r} must be non-empty and at most {_MAX_KEY_BYTES} bytes")
    return out


class Queues:
    """``client.queues``: create, change and feed queues in the daemon.

    Specs created or updated here are remembered on the client, so :meth:`Client.reensure`
    recreates the queue after a daemon restart. ``timeout_s`` overrides the client's deadline.
    In a replica set every call goes to the leader (:meth:`Client.on_leader`); ``timeout_s``
    bounds it with its retries.
    """

    def __init__(self, client: Client) -> None:
        self._client = client

    async def create(
        self, spec: queues_pb2.QueueSpec, *, timeout_s: float | None = None
    ) -> queues_pb2.QueueInfo:
        """Creates the queue; a no-op with an equal spec, :class:`informerd.FailedPrecondition`
        (QUEUE_EXISTS_WITH_OTHER_SPEC) with another one."""
        spec = _checked_spec(spec)
        info = await self._client.leader_unary(
            lambda s: s.queues.CreateQueue,
            queues_pb2.CreateQueueRequest(spec=spec),
            timeout_s,
        )
        self._client.remember_queue(spec)
        return info

    async def update(
        self,
        spec: queues_pb2.QueueSpec,
        *,
        allow_missing: bool = False,
        timeout_s: float | None = None,
    ) -> queues_pb2.QueueInfo:
        """Changes a running queue in place (keys, retries and leases kept); with
        ``allow_missing`` creates it if it does not exist (else :class:`informerd.NotFound`)."""
        spec = _checked_spec(spec)
        info = await self._client.leader_unary(
            lambda s: s.queues.UpdateQueue,
            queues_pb2.UpdateQueueRequest(spec=spec, allow_missing=allow_missing),
            timeout_s,
        )
        self._client.remember_queue(spec)
        return info

    async def delete(self, queue: str, *, timeout_s: float | None = None) -> None:
        """Shuts the queue down without draining and removes it (Work streams on it end)."""
        await self._client.leader_unary(
            lambda s: s.queues.DeleteQueue,
            queues_pb2.DeleteQueueRequest(queue=validate_queue_name(queue, "queue")),
            timeout_s,
        )
        self._client.forget_queue(queue)

    async def get(self, queue: str, *, timeout_s: float | None = None) -> queues_pb2.QueueInfo:
        """The queue's spec and state (depth, in flight, delayed, workers ...)."""
        return await self._client.leader_unary(
            lambda s: s.queues.GetQueue,
            queues_pb2.GetQueueRequest(queue=validate_queue_name(queue, "queue")),
            timeout_s,
        )

    async def add(
        self,
        queue: str,
        keys: str | Iterable[str],
        *,
        priority: int | None = None,
        timeout_s: float | None = None,
    ) -> None:
        """Adds keys now (deduplicated with waiting ones). ``priority`` (None: 0): higher is
        handed out first, FIFO within a priority; a key already waiting keeps the higher of its
        two priorities (controller-runtime's ``AddWithOpts(AddOpts{Priority})``)."""
        await self._client.leader_unary(
            lambda s: s.queues.Add,
            queues_pb2.AddRequest(
                queue=validate_queue_name(queue, "queue"),
                keys=_keys(keys),
                priority=validate_priority(priority),
            ),
            timeout_s,
        )

    async def add_after(
        self,
        queue: str,
        keys: str | Iterable[str],
        delay_s: float,
        *,
        priority: int | None = None,
        timeout_s: float | None = None,
    ) -> None:
        """Adds keys after ``delay_s`` seconds (0 adds now), then at ``priority`` (see
        :meth:`add`)."""
        await self._client.leader_unary(
            lambda s: s.queues.AddAfter,
            queues_pb2.AddAfterRequest(
                queue=validate_queue_name(queue, "queue"),
                keys=_keys(keys),
                delay_ms=_seconds_ms(delay_s, "delay_s"),
                priority=validate_priority(priority),
            ),
            timeout_s,
        )

    async def add_rate_limited(
        self,
        queue: str,
        keys: str | Iterable[str],
        *,
        priority: int | None = None,
        timeout_s: float | None = None,
    ) -> None:
        """Adds keys after the queue's rate limiter's delay (counts as a retry), then at
        ``priority`` (see :meth:`add`)."""
        await self._client.leader_unary(
            lambda s: s.queues.AddRateLimited,
            queues_pb2.AddRateLimitedRequest(
                queue=validate_queue_name(queue, "queue"),
                keys=_keys(keys),
                priority=validate_priority(priority),
            ),
            timeout_s,
        )

    async def forget(
        self, queue: str, keys: str | Iterable[str], *, timeout_s: float | None = None
    ) -> None:
        """Resets the keys' retry counts."""
        await self._client.leader_unary(
            lambda s: s.queues.Forget,
            queues_pb2.ForgetRequest(queue=validate_queue_name(queue, "queue"), keys=_keys(keys)),
            timeout_s,
        )

    async def num_requeues(self, queue: str, key: str, *, timeout_s: float | None = None) -> int:
        """How often ``key`` was retried so far."""
        resp = await self._client.leader_unary(
            lambda s: s.queues.NumRequeues,
            queues_pb2.NumRequeuesRequest(
                queue=validate_queue_name(queue, "queue"), key=_keys(key)[0]
            ),
            timeout_s,
        )
        return resp.requeues

    async def len(self, queue: str, *, timeout_s: float | None = None) -> int:
        """Keys waiting (client-go's Len)."""
        resp = await self._client.leader_unary(
            lambda s: s.queues.Len,
            queues_pb2.LenRequest(queue=validate_queue_name(queue, "queue")),
            timeout_s,
        )
        return resp.len

    async def shut_down(
        self, queue: str, *, drain: bool = False, timeout_s: float | None = None
    ) -> None:
        """Stops handing out keys; with ``drain`` returns once every key handed out is done."""
        await self._client.leader_unary(
            lambda s: s.queues.ShutDown,
            queues_pb2.ShutDownRequest(queue=validate_queue_name(queue, "queue"), drain=drain),
            timeout_s,
        )


def _checked_spec(spec: queues_pb2.QueueSpec) -> queues_pb2.QueueSpec:
    if not isinstance(spec, queues_pb2.QueueSpec):
        raise TypeError(f"spec: {spec!r} is not a QueueSpec (build it with queue_spec())")
    return queue_spec(
        spec.name,
        spec.sources,
        rate_limiter=spec.rate_limiter if spec.HasField("rate_limiter") else None,
        resync_period_s=spec.resync_period_ms / 1000,
        lease_timeout_s=spec.lease_timeout_ms / 1000,
    )


__all__: Sequence[str] = (
    "Queues",
    "annotations_changed",
    "bucket",
    "default_controller",
    "exponential",
    "fast_slow",
    "fields_changed",
    "generation_changed",
    "index_source",
    "labels_changed",
    "max_of",
    "object_source",
    "owner_source",
    "queue_spec",
    "validate_queue_name",
)
