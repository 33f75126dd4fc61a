"""The asyncio client: one channel to a daemon, typed access to every service.

    async with informerd.Client.connect("127.0.0.1:7470") as client:
        cms = await client.informers.ensure("v1", "ConfigMap", namespace="demo")
        await cms.wait_for_sync()

Every unary call has a deadline (``ConnectionOptions.timeout_s`` unless the call gives one) and
raises :mod:`informerd.errors` exceptions, never bare ``grpc.RpcError``. The client remembers what
it ensured (informers, queues) so that :meth:`Client.reensure` can recreate it after a daemon
restart; the controller runtime and the Store call it when they reconnect.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar

import grpc
import grpc.aio

from informerd.connection import ConnectionOptions
from informerd.errors import from_rpc_error
from informerd.v1 import (
    admin_pb2_grpc,
    informers_pb2,
    informers_pb2_grpc,
    queues_pb2,
    queues_pb2_grpc,
    work_pb2_grpc,
)

Resp = TypeVar("Resp")


class Stubs:
    """The generated asyncio stubs on one channel (for what the typed wrappers do not cover)."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.informers = informers_pb2_grpc.InformersStub(channel)
        self.queues = queues_pb2_grpc.QueuesStub(channel)
        self.work = work_pb2_grpc.WorkStub(channel)
        self.admin = admin_pb2_grpc.AdminStub(channel)


class Client:
    """An asyncio connection to informerd. Create with :meth:`connect`; close with :meth:`close`
    or ``async with``."""

    def __init__(self, options: ConnectionOptions) -> None:
        self.options = options
        self.channel = options.aio_channel()
        self.stubs = Stubs(self.channel)
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
        await self.channel.close(None)

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
        name them). Informers first: queues' sources refer to them."""
        for spec in list(self._informer_specs.values()):
            await self.unary(
                self.stubs.informers.EnsureInformer, informers_pb2.EnsureInformerRequest(spec=spec)
            )
        for queue_spec in list(self._queue_specs.values()):
            await self.unary(
                self.stubs.queues.UpdateQueue,
                queues_pb2.UpdateQueueRequest(spec=queue_spec, allow_missing=True),
            )
