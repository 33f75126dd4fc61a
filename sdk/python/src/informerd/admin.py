"""Admin: what the daemon runs (clusters, informers, queues with their workers)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from informerd.v1 import admin_pb2, informers_pb2

if TYPE_CHECKING:
    from informerd.client import Client


class Admin:
    def __init__(self, client: Client) -> None:
        self._client = client

    async def clusters(self, timeout_s: float | None = None) -> list[admin_pb2.ClusterInfo]:
        resp = await self._client.unary(
            self._client.stubs.admin.ListClusters, admin_pb2.ListClustersRequest(), timeout_s
        )
        return list(resp.clusters)

    async def informers(self, timeout_s: float | None = None) -> list[informers_pb2.InformerInfo]:
        resp = await self._client.unary(
            self._client.stubs.admin.ListInformers, admin_pb2.ListInformersRequest(), timeout_s
        )
        return list(resp.informers)

    async def queues(self, timeout_s: float | None = None) -> list[admin_pb2.QueueDetails]:
        resp = await self._client.unary(
            self._client.stubs.admin.ListQueues, admin_pb2.ListQueuesRequest(), timeout_s
        )
        return list(resp.queues)
