"""The asyncio client: one channel to a daemon, typed access to every service.

    async with informerd.Client.connect("127.0.0.1:7470") as client:
        cms = await client.informers.ensure("v1", "ConfigMap", namespace="demo")
        await cms.wait_for_sync()

Every unary call has a deadline (``ConnectionOptions.timeout_s`` unless the call gives one) and
raises :mod:`informerd.errors` exceptions, never bare ``grpc.RpcError``. The client remembers what
it ensured (informers, queues) so that :meth:`Client.reensure` can recreate it after a daemon
restart; the controller runtime and the Store call it when they reconnect.

**Replica sets.** Reads (Informers, Admin) go to the configured target, any replica. Queues and
Work calls go to the leader: a follower answers them with :class:`informerd.NotLeader` naming the
leader's address, and the client opens a channel there (same options: credentials, TLS server
name, token), remembers it and retries the call on it (:meth:`Client.on_leader`). While no leader
is known the call is retried on the configured target with backoff (100 ms doubling to 2 s),
within its deadline; when the leader's channel fails (UNAVAILABLE) the client goes back to the
configured target, which names the next leader.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

import grpc
import grpc.aio

from informerd.connection import Backoff, ConnectionOptions
from informerd.errors import InformerdError, NotLeader, Timeout, Unavailable, from_rpc_error
from informerd.v1 import (
    admin_pb2_grpc,
    informers_pb2,
    informers_pb2_grpc,
    queues_pb2,
    queues_pb2_grpc,
    work_pb2_grpc,
)

Resp = TypeVar("Resp")
T = TypeVar("T")

_log = logging.getLogger("informerd.client")

# Retries of a Queues or Work call while no leader is known (NOT_LEADER without an address), or
# while the known one does not answer: 100 ms doubling to 2 s, jittered, within the call's
# deadline.
LEADER_BACKOFF_INITIAL_S = 0.1
LEADER_BACKOFF_MAX_S = 2.0


class Stubs:
    """The generated asyncio stubs on one channel (for what the typed wrappers do not cover)."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.informers = informers_pb2_grpc.InformersStub(channel)
        self.queues = queues_pb2_grpc.QueuesStub(channel)
        self.work = work_pb2_grpc.WorkStub(channel)
        self.admin = admin_pb2_grpc.AdminStub(channel)


@dataclass(eq=False)
class Route:
    """Where a Queues or Work call goes: the configured target (``address`` None), or the leader
    of a replica set at the address a follower named (with its own channel)."""

    stubs: Stubs
    address: str | None = None
    channel: grpc.aio.Channel | None = None
    # Informers (by id) this client ensured on the leader, so queue sources can name them there.
    ensured: set[str] = field(default_factory=set)

    def __str__(self) -> str:
        return f"leader {self.address}" if self.address else "the configured target"


class Client:
    """An asyncio connection to informerd. Create with :meth:`connect`; close with :meth:`close`
    or ``async with``."""

    def __init__(self, options: ConnectionOptions) -> None:
        self.options = options
        self.channel = options.aio_channel()
        self.stubs = Stubs(self.channel)
        self._target_route = Route(self.stubs)
        # The leader of the replica set, when a follower named it (None: the configured target).
        self._leader: Route | None = None
        # Leader channels the client stopped using: calls may still end on them (a Work stream
        # broken by the leader's change); closed with the client.
        self._retired: list[grpc.aio.Channel] = []
        # What this client ensured, by informer id and queue name, for reensure().
        self._informer_specs: dict[str, informers_pb2.InformerSpec] = {}
        self._queue_specs: dict[str, queues_pb2.QueueSpec] = {}
        from informerd.admin import Admin
        from informerd.informers import Informers
        from informerd.queues import Queues

        self.informers = Informers(self)
        self.queues = Queues(self)
        self.admin = Admin(self)

    @classmethod
    def connect(cls, target: str = "127.0.0.1:7470", **options: Any) -> Client:
        """A client for ``target`` with :class:`ConnectionOptions` given as keywords (or
        ``options=ConnectionOptions(...)``). The channel connects lazily, on the first call."""
        given = options.pop("options", None)
        if given is not None:
            if options:
                raise TypeError("Client.connect: pass options= or keywords, not both")
            return cls(given)
        return cls(ConnectionOptions(target=target, **options))

    async def close(self) -> None:
        channels = [self.channel, *self._retired]
        if self._leader is not None and self._leader.channel is not None:
            channels.append(self._leader.channel)
        self._leader = None
        self._retired = []
        for channel in channels:
            await channel.close(None)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def call_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.options.metadata()

    async def unary(
        self,
        method: Callable[..., Awaitable[Resp]],
        request: object,
        timeout_s: float | None = None,
    ) -> Resp:
        """Calls a unary stub method with the deadline and credentials, translating errors."""
        try:
            return await method(
                request,
                timeout=timeout_s if timeout_s is not None else self.options.timeout_s,
                metadata=self.call_metadata(),
            )
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    # --- the leader of a replica set -------------------------------------------------------

    @property
    def leader_address(self) -> str | None:
        """The address of the replica set's leader that Queues and Work calls go to; None while
        they go to the configured target (a single daemon, the leader itself, or no leader
        known)."""
        return self._leader.address if self._leader is not None else None

    @property
    def leader_route(self) -> Route:
        """Where the next Queues or Work call goes."""
        return self._leader if self._leader is not None else self._target_route

    def _follow(self, address: str) -> None:
        if address == self.options.target:
            self._unfollow()
            return
        if self._leader is not None and self._leader.address == address:
            return
        self._unfollow()
        channel = self.options.aio_channel(address)
        self._leader = Route(Stubs(channel), address, channel)
        _log.info("following the replica set's leader at %s", address)

    def _unfollow(self) -> None:
        if self._leader is not None:
            assert self._leader.channel is not None
            self._retired.append(self._leader.channel)
            self._leader = None

    def observe(self, error: InformerdError, route: Route) -> None:
        """Learns from ``error``, which a Queues or Work call on ``route`` ended with: a
        NOT_LEADER naming a leader makes the next calls go there; one naming none, or an
        UNAVAILABLE from the leader's channel (the leader gone), sends them back to the
        configured target. Errors from a route no longer used change nothing."""
        if route is not self.leader_route:
            return
        if isinstance(error, NotLeader):
            if error.leader_address:
                self._follow(error.leader_address)
            elif route.address is not None:
                self._unfollow()
        elif (
            isinstance(error, Unavailable)
            and route.address is not None
            and not error.reason  # a refusal of the leader's own, e.g. AUTHORIZATION_UNAVAILABLE
        ):
            _log.info("the leader at %s is unavailable (%s)", route.address, error)
            self._unfollow()

    async def _prepare(self, route: Route, timeout_s: float) -> None:
        """Ensures on the leader the informers this client ensured, which the queues' sources
        and Work streams name by id."""
        for informer_id, spec in list(self._informer_specs.items()):
            if informer_id in route.ensured:
                continue
            await self.unary(
                route.stubs.informers.EnsureInformer,
                informers_pb2.EnsureInformerRequest(spec=spec),
                timeout_s,
            )
            route.ensured.add(informer_id)

    async def on_leader(
        self,
        attempt: Callable[[Route, float], Awaitable[T]],
        timeout_s: float | None = None,
    ) -> T:
        """Runs ``attempt(route, remaining_s)`` — a Queues or Work call — on the replica set's
        leader, following NOT_LEADER answers (see the module doc), within ``timeout_s`` in all
        (default: the client's deadline). ``attempt`` raises :mod:`informerd.errors` exceptions;
        the last one is raised when the deadline leaves no time for another try. Against a
        single daemon this is one call of ``attempt`` on the configured target."""
        timeout = timeout_s if timeout_s is not None else self.options.timeout_s
        deadline = time.monotonic() + timeout
        backoff = Backoff(LEADER_BACKOFF_INITIAL_S, LEADER_BACKOFF_MAX_S)
        # Leader addresses that failed during this call: a follower naming one again (its
        # Lease has not expired yet) is followed after a backoff, not at once.
        failed: set[str] = set()
        while True:
            route = self.leader_route
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Timeout(
                    f"DEADLINE_EXCEEDED: no leader answered within {timeout} s",
                    code=grpc.StatusCode.DEADLINE_EXCEEDED,
                )
            try:
                if route.address is not None:
                    await self._prepare(route, remaining)
                return await attempt(route, remaining)
            except NotLeader as e:
                error: InformerdError = e
            except Unavailable as e:
                if route.address is None or e.reason:
                    raise
                failed.add(route.address)
                error = e
            self.observe(error, route)
            # A new route (a leader named, or back to the configured target from a leader that
            # is gone or stepped down) is tried at once; the same one again after a backoff.
            now = self.leader_route
            if now is not route and (now.address is None or now.address not in failed):
                _log.debug("%s: retrying on %s", error, now)
                continue
            delay = backoff.next()
            if time.monotonic() + delay >= deadline:
                raise error
            await asyncio.sleep(delay)

    async def leader_unary(
        self,
        method: Callable[[Stubs], Callable[..., Awaitable[Resp]]],
        request: object,
        timeout_s: float | None = None,
    ) -> Resp:
        """A unary Queues call on the leader (:meth:`on_leader`): ``method`` picks the stub's
        method, e.g. ``lambda s: s.queues.Add``; ``timeout_s`` bounds the call with its
        retries."""

        def attempt(route: Route, remaining_s: float) -> Awaitable[Resp]:
            return self.unary(method(route.stubs), request, remaining_s)

        return await self.on_leader(attempt, timeout_s)

    # --- what this client ensured ---------------------------------------------------------

    def remember_informer(self, informer_id: str, spec: informers_pb2.InformerSpec) -> None:
        self._informer_specs[informer_id] = spec

    def remembers_informer(self, informer_id: str) -> bool:
        """This client ensured the informer (so :meth:`reensure` brings it back)."""
        return informer_id in self._informer_specs

    def forget_informer(self, informer_id: str) -> None:
        self._informer_specs.pop(informer_id, None)

    def remember_queue(self, spec: queues_pb2.QueueSpec) -> None:
        self._queue_specs[spec.name] = spec

    def forget_queue(self, name: str) -> None:
        self._queue_specs.pop(name, None)

    async def reensure(self) -> None:
        """Ensures again every informer and queue this client ensured (after a daemon restart
        they are gone; ids of informers are stable for equal specs, so queue sources still
        name them). Informers first: queues' sources refer to them. Queues go to the leader
        of a replica set, and the informers too (again: it may be a new leader)."""
        for spec in list(self._informer_specs.values()):
            await self.unary(
                self.stubs.informers.EnsureInformer, informers_pb2.EnsureInformerRequest(spec=spec)
            )
        if self._leader is not None:
            self._leader.ensured.clear()
        for queue_spec in list(self._queue_specs.values()):
            await self.leader_unary(
                lambda s: s.queues.UpdateQueue,
                queues_pb2.UpdateQueueRequest(spec=queue_spec, allow_missing=True),
            )
