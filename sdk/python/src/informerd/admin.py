"""Admin: what the daemon runs (clusters, informers, queues with their workers) and its role in
a replica set."""

from __future__ import annotations

import datetime
import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from informerd.v1 import admin_pb2, informers_pb2

if TYPE_CHECKING:
    from informerd.client import Client


class ReplicaRole(enum.Enum):
    """A daemon's role (admin.proto ReplicaRole)."""

    #: A daemon older than leader election, or a role this SDK does not know.
    UNSPECIFIED = admin_pb2.REPLICA_ROLE_UNSPECIFIED
    #: Leader election is off: the daemon serves everything.
    STANDALONE = admin_pb2.STANDALONE
    #: Holds the Lease: serves Informers, Queues and Work.
    LEADER = admin_pb2.LEADER
    #: Serves Informers; answers Queues and Work with NOT_LEADER naming the leader.
    FOLLOWER = admin_pb2.FOLLOWER


@dataclass(frozen=True)
class Replica:
    """One daemon's view of its replica set (``Admin.GetReplica``)."""

    role: ReplicaRole
    #: This replica's identity (the Lease's holderIdentity while it leads).
    identity: str
    #: Where this replica serves gRPC, as it advertises it to clients.
    address: str
    #: The leader as last observed ("" when none is known).
    leader: str
    leader_address: str
    #: The Lease, as "namespace/name", and the cluster that holds it.
    lease: str
    cluster: str
    #: The Lease's leaseTransitions as last observed; while leading, this replica's term.
    lease_transitions: int
    #: While leading: when this term began (UTC), and the epoch of its tokens.
    leading_since: datetime.datetime | None
    token_epoch: int

    @property
    def is_leader(self) -> bool:
        """The replica serves Queues and Work (it leads, or leader election is off)."""
        return self.role in (ReplicaRole.LEADER, ReplicaRole.STANDALONE)

    @classmethod
    def from_proto(cls, info: admin_pb2.ReplicaInfo) -> Replica:
        try:
            role = ReplicaRole(info.role)
        except ValueError:
            role = ReplicaRole.UNSPECIFIED
        since = None
        if info.leading_since_unix_ms:
            since = datetime.datetime.fromtimestamp(
                info.leading_since_unix_ms / 1000, tz=datetime.timezone.utc
            )
        return cls(
            role=role,
            identity=info.identity,
            address=info.address,
            leader=info.leader,
            leader_address=info.leader_address,
            lease=info.lease,
            cluster=info.cluster,
            lease_transitions=info.lease_transitions,
            leading_since=since,
            token_epoch=info.token_epoch,
        )


class Admin:
    """``client.admin``: these calls go to the configured target (whichever replica it is)."""

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

    async def get_replica(self, timeout_s: float | None = None) -> Replica:
        """The daemon's role in its replica set: STANDALONE without leader election, else
        LEADER or FOLLOWER, with the leader it knows and the Lease."""
        info = await self._client.unary(
            self._client.stubs.admin.GetReplica, admin_pb2.GetReplicaRequest(), timeout_s
        )
        return Replica.from_proto(info)
