"""A tenant sharing the chaos cluster's replicas (issue 27's isolation oracle).

The tenant is a service account whose RBAC allows the ConfigMaps of its own namespace and its
own queue, nothing else. Beside the nemesis it reads what it may and tries, as an attacker
would, what it may not — the workers' namespace through an informer of its own, the workers'
informer by id, a queue whose source is that informer or an informer that does not exist, the
workers' queue, a Work stream that would carry the workers' objects, a made-up token — against
a random replica, leader or follower, whatever fault is on.

What must hold across the whole run: **no tenant read outside its RBAC**. Every object any of
its calls returned is in its namespace, every attack is refused with the refusal it names
(PERMISSION_DENIED, NOT_FOUND, UNAUTHENTICATED), never accepted; a call the fault of the moment
leaves unanswered (UNAVAILABLE, a deadline) is counted, not a finding: an unanswered call reads
nothing. A refusal of another kind is a finding too (the daemon's answer must name the rule).
"""

from __future__ import annotations

import asyncio
import random
import secrets
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import informerd
from informerd.queues import object_source, queue_spec
from informerd.v1 import informers_pb2
from tests.chaos.cluster import (
    NAMESPACE,
    QUEUE,
    TENANT_NAMESPACE,
    TENANT_OBJECTS,
    TENANT_QUEUE,
    Access,
)

# What the fault of the moment may leave a call with: it read nothing.
UNANSWERED = (informerd.Unavailable, informerd.Timeout)
# The longest one call of a round may take (a frozen replica answers nothing).
CALL_S = 15.0
# One attack: its name, the call, and the refusal it must get (that class exactly).
Attack = tuple[str, Callable[[], Awaitable[object]], type[informerd.InformerdError]]


@dataclass
class TenantReport:
    rounds: int = 0
    #: Objects the tenant's allowed reads returned (every one in its namespace).
    objects_read: int = 0
    #: Each attack's refusals, by attack and refusal ("ensure-workers-namespace PermissionDenied").
    refused: Counter[str] = field(default_factory=Counter)
    #: Calls the faults left unanswered, by what was tried.
    unanswered: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "rounds": self.rounds,
            "objects_read": self.objects_read,
            "refused": dict(sorted(self.refused.items())),
            "unanswered": dict(sorted(self.unanswered.items())),
            "violations": self.violations[:20],
        }


class Tenant:
    def __init__(self, access: Access, token: str, workers_informer_id: str) -> None:
        self.access = access
        self.token = token
        self.workers_informer = workers_informer_id
        self.report = TenantReport()

    def check(self) -> None:
        assert not self.report.violations, (
            f"the tenant read or did what its RBAC does not allow: {self.report.violations[:5]}"
        )

    def _seen(self, what: str, objects: list[informerd.KubeObject]) -> None:
        outside = [o.key for o in objects if o.metadata.namespace != TENANT_NAMESPACE]
        if outside:
            self.report.violations.append(f"{what} returned {outside[:5]}")
        self.report.objects_read += len(objects)

    async def _refused(
        self,
        what: str,
        call: Callable[[], Awaitable[object]],
        want: type[informerd.InformerdError],
    ) -> None:
        """``call()`` must be refused with exactly ``want`` (or left unanswered by a fault)."""
        try:
            got = await asyncio.wait_for(call(), CALL_S)
        except (*UNANSWERED, TimeoutError):
            self.report.unanswered[what] += 1
            return
        except informerd.InformerdError as e:
            if type(e) is want:
                self.report.refused[f"{what} {want.__name__}"] += 1
            else:
                got_class = type(e).__name__
                self.report.violations.append(f"{what}: {got_class} {e}, want {want.__name__}")
            return
        self.report.violations.append(f"{what} was accepted: {got!r:.300}")

    async def round(self, target: str, rng: random.Random) -> None:
        """One round of reads and attacks at the replica ``target``."""
        self.report.rounds += 1
        async with self.access.connect(target, timeout_s=5, token=self.token) as client:
            # What it may read: its own namespace, all of it and nothing else. And its own
            # queue, which it may make (the queue attacks below would change it).
            await self._allowed("list-own", lambda: self._list_own(client))
            await self._allowed(
                "own-queue",
                lambda: client.queues.update(queue_spec(TENANT_QUEUE), allow_missing=True),
            )

            workers = informerd.Informer(
                client, informers_pb2.InformerInfo(id=self.workers_informer, namespaced=True)
            )
            attacks: list[Attack] = [
                (
                    "ensure-workers-namespace",
                    lambda: client.informers.ensure("v1", "ConfigMap", namespace=NAMESPACE),
                    informerd.PermissionDenied,
                ),
                (
                    "ensure-cluster-wide",
                    lambda: client.informers.ensure("v1", "ConfigMap"),
                    informerd.PermissionDenied,
                ),
                (
                    "get-workers-informer",
                    lambda: client.informers.get(self.workers_informer),
                    informerd.PermissionDenied,
                ),
                (
                    "list-workers-informer",
                    lambda: self._list_and_see(workers, ""),
                    informerd.PermissionDenied,
                ),
                (
                    "list-workers-informer-own-namespace",
                    lambda: self._list_and_see(workers, TENANT_NAMESPACE),
                    informerd.PermissionDenied,
                ),
                (
                    "get-workers-object",
                    lambda: workers.get(f"{NAMESPACE}/chaos-0000"),
                    informerd.PermissionDenied,
                ),
                (
                    "watch-workers-informer",
                    lambda: self._watch_and_see(workers),
                    informerd.PermissionDenied,
                ),
                (
                    "queue-over-workers-informer",
                    lambda: client.queues.update(
                        queue_spec(TENANT_QUEUE, [object_source(self.workers_informer)]),
                        allow_missing=True,
                    ),
                    informerd.PermissionDenied,
                ),
                (
                    "queue-over-unknown-informer",
                    lambda: client.queues.update(
                        queue_spec(
                            TENANT_QUEUE, [object_source(f"configmaps-{secrets.token_hex(8)}")]
                        ),
                        allow_missing=True,
                    ),
                    informerd.NotFound,
                ),
                (
                    "work-workers-queue",
                    lambda: self._work(client, QUEUE, ""),
                    informerd.PermissionDenied,
                ),
                (
                    "work-own-queue-with-workers-objects",
                    lambda: self._work(client, TENANT_QUEUE, self.workers_informer),
                    informerd.PermissionDenied,
                ),
            ]
            rng.shuffle(attacks)
            for what, call, want in attacks:
                await self._refused(what, call, want)
        # A made-up token: nobody.
        forged = self.access.connect(target, timeout_s=5, token=secrets.token_urlsafe(32))
        async with forged:
            await self._refused(
                "forged-token",
                lambda: forged.informers.ensure("v1", "ConfigMap", namespace=TENANT_NAMESPACE),
                informerd.Unauthenticated,
            )

    async def _allowed(self, what: str, call: Callable[[], Awaitable[object]]) -> None:
        """``call()``, which its RBAC allows, must succeed (or be left unanswered by a fault)."""
        try:
            await asyncio.wait_for(call(), CALL_S)
        except (*UNANSWERED, TimeoutError):
            self.report.unanswered[what] += 1
        except informerd.InformerdError as e:
            self.report.violations.append(f"{what}, which its RBAC allows: {type(e).__name__} {e}")

    async def _list_own(self, client: informerd.Client) -> None:
        own = await client.informers.ensure("v1", "ConfigMap", namespace=TENANT_NAMESPACE)
        await own.wait_for_sync(timeout_s=5)
        objects = await own.list()
        self._seen("a List of its own informer", objects)
        if len(objects) != TENANT_OBJECTS:
            self.report.violations.append(
                f"its own List returned {len(objects)} objects, want {TENANT_OBJECTS}"
            )

    async def _list_and_see(self, informer: informerd.Informer, namespace: str) -> object:
        objects = await informer.list(namespace=namespace)
        self._seen(f"a List of the workers' informer (namespace {namespace!r})", objects)
        return [o.key for o in objects]

    async def _watch_and_see(self, informer: informerd.Informer) -> object:
        async with informer.watch(reconnect=False) as events:
            event = await events.__anext__()
        if isinstance(event, informerd.Added):
            self._seen("a Watch of the workers' informer", [event.object])
        return event

    async def _work(self, client: informerd.Client, queue: str, object_informer: str) -> object:
        """A Work stream on ``queue`` (its objects from ``object_informer``); what it leased."""
        async with informerd.WorkStream(
            client, queue, max_in_flight=8, object_informer_id=object_informer
        ):
            return "a Work stream started"
