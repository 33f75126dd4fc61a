"""Replica sets against real daemons on one fake API server: followers redirect Queues and Work
calls to the leader, and a controller follows the leader across failovers (SIGKILL, SIGSTOP),
cancelling the reconciles of a broken stream at once."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import itertools
import secrets
import signal
import time
import urllib.error
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import informerd
from informerd import Context, Controller, KubeObject, ReconcileEvent, Replica, ReplicaRole
from informerd.queues import object_source, queue_spec
from informerd.testing import Daemon, FakeApiServer, LeaderElection, eventually, queue_idle
from informerd.testing.pki import Pki
from informerd.v1 import queues_pb2
from informerd.work import Lease, Outcome, WorkStream

HA_NAMESPACE = "informerd-ha"


def register_queue_resource(api: FakeApiServer) -> None:
    """The Queue objects a leader keeps the queues created over the API in (the CRD deploy/
    installs on a real cluster), registered once on the session's fake."""
    try:
        api.control(
            "/_fake/resources",
            {
                "group": "informerd.io",
                "version": "v1alpha1",
                "resource": "queues",
                "kind": "Queue",
                "namespaced": True,
                "customResource": True,
            },
        )
    except urllib.error.HTTPError as e:
        if e.code not in (400, 409):  # registered already
            raise


class ReplicaSet:
    """Daemons on one Lease of the fake API server, with fast timings (3 s lease). ``options``
    are the :class:`informerd.ConnectionOptions` keywords that reach them (TLS)."""

    def __init__(self, api: FakeApiServer, workdir: Path, lease: str) -> None:
        self.api = api
        self.workdir = workdir
        self.election = LeaderElection.fast(HA_NAMESPACE, lease)
        self.daemons: list[Daemon] = []
        self.options: dict[str, Any] = {}

    def start(self, n: int = 1, extra_args: Sequence[str] = ()) -> list[Daemon]:
        started = []
        for _ in range(n):
            d = self.workdir / f"replica{len(self.daemons)}"
            d.mkdir()
            daemon = Daemon.start(
                self.api.kubeconfig, d, extra_args=extra_args, leader_election=self.election
            )
            self.daemons.append(daemon)
            started.append(daemon)
        return started

    async def start_pair(self, extra_args: Sequence[str] = ()) -> tuple[Daemon, Daemon]:
        """Starts two replicas; returns them as (leader, follower) once they agree."""
        daemons = self.start(2, extra_args)
        leader = await self.settled_leader(daemons)
        return leader, next(d for d in daemons if d is not leader)

    def connect(self, daemon: Daemon, timeout_s: float = 20) -> informerd.Client:
        return informerd.Client.connect(daemon.target, timeout_s=timeout_s, **self.options)

    async def info(self, daemon: Daemon) -> Replica | None:
        """The daemon's Admin.GetReplica, or None when it does not answer."""
        async with self.connect(daemon, timeout_s=2) as client:
            try:
                return await client.admin.get_replica()
            except (informerd.Unavailable, informerd.Timeout):
                return None

    async def settled_leader(self, daemons: list[Daemon], timeout_s: float = 60) -> Daemon:
        """Waits until one of ``daemons`` leads and every other one follows it, naming its
        address; returns the leader."""
        found: list[Daemon] = []

        async def settled() -> bool:
            infos = [await self.info(d) for d in daemons]
            leaders = [
                d for d, i in zip(daemons, infos, strict=True) if i and i.role == ReplicaRole.LEADER
            ]
            if len(leaders) != 1:
                return False
            leader = leaders[0]
            for d, info in zip(daemons, infos, strict=True):
                if d is leader or info is None:
                    continue
                if info.role != ReplicaRole.FOLLOWER or info.leader_address != leader.target:
                    return False
            found[:] = [leader]
            return True

        await eventually(settled, "one leader, the others following it", timeout_s, interval_s=0.2)
        return found[0]

    def close(self) -> None:
        for d in self.daemons:
            d.close()


@pytest.fixture
def replica_set(fake_apiserver: FakeApiServer, tmp_path: Path) -> Iterator[ReplicaSet]:
    fake_apiserver.create_namespace(HA_NAMESPACE)
    register_queue_resource(fake_apiserver)
    rs = ReplicaSet(fake_apiserver, tmp_path, f"ha-{secrets.token_hex(4)}")
    try:
        yield rs
    finally:
        rs.close()


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def seed_keys(api: FakeApiServer, namespace: str, count: int) -> set[str]:
    api.seed("configmaps", namespace, count)
    return {f"{namespace}/seed-{i:07d}" for i in range(count)}


# --- Admin.GetReplica ---------------------------------------------------------------------------


async def test_a_single_daemon_is_standalone(informerd_client: informerd.Client) -> None:
    replica = await informerd_client.admin.get_replica()
    assert replica.role == ReplicaRole.STANDALONE
    assert replica.is_leader
    assert replica.leading_since is None


async def test_get_replica_names_the_leader_its_lease_and_its_term(
    replica_set: ReplicaSet,
) -> None:
    leader, follower = await replica_set.start_pair()
    lead = await replica_set.info(leader)
    follow = await replica_set.info(follower)
    assert lead is not None
    assert follow is not None
    lease = f"{HA_NAMESPACE}/{replica_set.election.name}"
    assert (lead.role, lead.identity, lead.address) == (
        ReplicaRole.LEADER,
        leader.identity,
        leader.target,
    )
    assert (lead.leader, lead.leader_address, lead.lease) == (
        leader.identity,
        leader.target,
        lease,
    )
    assert lead.is_leader
    assert lead.leading_since is not None
    # The term's tokens come after its epoch, which is at least the wall clock (Unix ns) when
    # the term was taken, just before leading_since (work.proto's Started.epoch).
    since_ns = int(lead.leading_since.timestamp()) * 10**9
    assert lead.token_epoch >= since_ns - 30 * 10**9
    assert lead.leading_since <= datetime.datetime.now(datetime.timezone.utc)
    assert (follow.role, follow.identity, follow.address) == (
        ReplicaRole.FOLLOWER,
        follower.identity,
        follower.target,
    )
    assert (follow.leader, follow.leader_address, follow.lease) == (
        leader.identity,
        leader.target,
        lease,
    )
    assert not follow.is_leader
    assert follow.cluster == lead.cluster


# --- following the leader -----------------------------------------------------------------------


async def test_queue_calls_to_a_follower_go_to_the_leader_and_reads_stay(
    replica_set: ReplicaSet, fake_apiserver: FakeApiServer
) -> None:
    leader, follower = await replica_set.start_pair()
    fake_apiserver.seed("configmaps", "ha-redirect", 3)
    async with informerd.Client.connect(follower.target, timeout_s=20) as client:
        # The follower itself refuses, naming the leader (a raw call does not follow).
        with pytest.raises(informerd.NotLeader) as e:
            await client.unary(client.stubs.queues.Len, queues_pb2.LenRequest(queue="ha-redirect"))
        assert isinstance(e.value, informerd.Unavailable)
        assert e.value.reason == "NOT_LEADER"
        assert (e.value.leader, e.value.leader_address) == (leader.identity, leader.target)
        assert client.leader_address is None

        # Reads are served by the follower.
        cms = await client.informers.ensure("v1", "ConfigMap", namespace="ha-redirect")
        await cms.wait_for_sync(timeout_s=30)
        assert await cms.get("ha-redirect/seed-0000001") is not None

        # The typed calls follow the leader; the queue's source names an informer the client
        # ensured on the follower, so the client ensures it on the leader too.
        spec = queue_spec("ha-redirect", [object_source(cms)])
        await client.queues.create(spec)
        assert client.leader_address == leader.target
        await client.queues.add("ha-redirect", ["by-hand"])
        info = await client.queues.get("ha-redirect")
        assert info.state.depth == 4  # the three objects and the key added by hand

    async with informerd.Client.connect(leader.target, timeout_s=20) as direct:
        assert (await direct.queues.get("ha-redirect")).state.depth == 4
        assert direct.leader_address is None  # the leader serves it


async def test_a_work_stream_opened_on_a_follower_runs_on_the_leader(
    replica_set: ReplicaSet,
) -> None:
    leader, follower = await replica_set.start_pair()
    lead = await replica_set.info(leader)
    assert lead is not None
    async with informerd.Client.connect(follower.target, timeout_s=20) as client:
        await client.queues.create(queue_spec("ha-work"))
        await client.queues.add("ha-work", ["a", "b", "c"])
        async with informerd.Client.connect(follower.target, timeout_s=20) as fresh:
            # A client whose first call is the Work stream follows too.
            stream = WorkStream(fresh, "ha-work", max_in_flight=10)
            started = await stream.start()
            assert stream.address == leader.target
            assert fresh.leader_address == leader.target
            assert started.epoch == lead.token_epoch
            got: list[Lease] = []
            while len(got) < 3:
                batch = await asyncio.wait_for(stream.receive(), 30)
                assert batch is not None
                got.extend(batch)
            assert sorted(lease.key for lease in got) == ["a", "b", "c"]
            assert all(lease.token > started.epoch for lease in got)
            for lease in got:
                stream.complete(lease, Outcome.SUCCESS)
            await eventually(lambda: queue_idle(client, "ha-work"), "the outcomes applied")
            await stream.close()


async def test_reads_from_a_follower_equal_the_leaders_under_churn(
    replica_set: ReplicaSet, fake_apiserver: FakeApiServer
) -> None:
    ns = "ha-reads"
    leader, follower = await replica_set.start_pair()
    fake_apiserver.seed("configmaps", ns, 200)
    async with (
        replica_set.connect(leader) as on_leader,
        replica_set.connect(follower) as on_follower,
    ):
        informers = [
            await c.informers.ensure("v1", "ConfigMap", namespace=ns)
            for c in (on_leader, on_follower)
        ]
        for informer in informers:
            await informer.wait_for_sync(timeout_s=30)
        fake_apiserver.control(
            "/_fake/churn",
            {
                "resource": "configmaps",
                "namespace": ns,
                "ops": 1000,
                "creates": 1,
                "updates": 8,
                "deletes": 1,
                "wait": True,
            },
        )
        listed = fake_apiserver.request("GET", f"/api/v1/namespaces/{ns}/configmaps")
        truth = {
            f"{ns}/{item['metadata']['name']}": item["metadata"]["resourceVersion"]
            for item in listed["items"]
        }

        async def both_caught_up() -> bool:
            for informer in informers:
                objects = await informer.list()
                if {o.key: o.resource_version for o in objects} != truth:
                    return False
            return True

        await eventually(both_caught_up, "leader and follower caches equal to the API server")
        # The same objects, byte for byte.
        leader_objects, follower_objects = [await i.list() for i in informers]
        assert {o.key: o.body for o in leader_objects} == {o.key: o.body for o in follower_objects}


@pytest.fixture
def tls_args(replica_set: ReplicaSet, tmp_path: Path) -> list[str]:
    """The replicas' TLS flags (client certificates required); ``replica_set.options`` reach
    them. Their certificate names neither replica's address, only ``informerd.test``: the
    client verifies it under that name (``server_name``), on the leader's channel too."""
    pki = Pki(tmp_path / "pki")
    ca = pki.ca("ca")
    server = pki.server_cert("server", ca, ips=(), dns=("informerd.test",))
    client = pki.client_cert("client", ca, "alice")
    replica_set.options = {
        "root_certificates": ca.cert,
        "client_certificate": client.cert,
        "client_key": client.key,
        "server_name": "informerd.test",
    }
    return [f"--tls_cert={server.cert}", f"--tls_key={server.key}", f"--tls_client_ca={ca.cert}"]


async def test_the_leader_is_reached_with_the_same_tls_options(
    replica_set: ReplicaSet, tls_args: list[str]
) -> None:
    leader, follower = await replica_set.start_pair(tls_args)
    async with replica_set.connect(follower) as client:
        await client.queues.create(queue_spec("ha-tls"))
        assert client.leader_address == leader.target
        await client.queues.add("ha-tls", "k")
        stream = WorkStream(client, "ha-tls", max_in_flight=1)
        await stream.start()
        assert stream.address == leader.target
        batch = await asyncio.wait_for(stream.receive(), 30)
        assert batch is not None
        assert [lease.key for lease in batch] == ["k"]
        stream.complete(batch[0], Outcome.SUCCESS)
        await eventually(lambda: queue_idle(client, "ha-tls"), "the outcome applied")
        await stream.close()


async def test_without_a_known_leader_queue_calls_retry_within_their_deadline(
    replica_set: ReplicaSet, fake_apiserver: FakeApiServer
) -> None:
    """A Lease held by a live holder that advertises no address: the follower answers NOT_LEADER
    without one, and the client retries on it with backoff until its deadline; once the Lease
    is gone (and the holder's last lease has run out: it may still have been leading) the
    daemon leads and a waiting call goes through."""
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{HA_NAMESPACE}/leases"
    lease_path = f"{leases}/{replica_set.election.name}"

    def stamp() -> str:
        return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    now = stamp()
    fake_apiserver.request(
        "POST",
        leases,
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": replica_set.election.name, "namespace": HA_NAMESPACE},
            "spec": {
                "holderIdentity": "ghost",
                "leaseDurationSeconds": 10,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        },
    )

    async def ghost_renews() -> None:
        """The ghost renews its Lease every second, as a live leader does."""
        while True:
            with contextlib.suppress(urllib.error.HTTPError):
                lease = await asyncio.to_thread(fake_apiserver.request, "GET", lease_path)
                lease["spec"]["renewTime"] = stamp()
                await asyncio.to_thread(fake_apiserver.request, "PUT", lease_path, lease)
            await asyncio.sleep(1)

    ghost = asyncio.create_task(ghost_renews())
    (daemon,) = replica_set.start(1)

    async def follows_the_ghost() -> bool:
        info = await replica_set.info(daemon)
        return info is not None and info.role == ReplicaRole.FOLLOWER and info.leader == "ghost"

    await eventually(follows_the_ghost, "the daemon following the ghost", 60)
    async with informerd.Client.connect(daemon.target, timeout_s=20) as client:
        started = time.monotonic()
        with pytest.raises(informerd.NotLeader) as e:
            await client.queues.len("ha-noleader", timeout_s=1.5)
        elapsed = time.monotonic() - started
        assert (e.value.leader, e.value.leader_address) == ("ghost", "")
        # Retried (the first answer comes at once), and given up within the deadline.
        assert 0.5 < elapsed < 10, elapsed
        assert client.leader_address is None

        waiting = asyncio.create_task(client.queues.create(queue_spec("ha-noleader"), timeout_s=60))
        await asyncio.sleep(1)
        assert not waiting.done()
        ghost.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ghost
        fake_apiserver.request("DELETE", lease_path)
        info = await asyncio.wait_for(waiting, 60)
        assert info.spec.name == "ha-noleader"
        replica = await client.admin.get_replica()
        assert replica.role == ReplicaRole.LEADER
        assert replica.identity == daemon.identity


# --- failover under a controller ----------------------------------------------------------------


class Recorder:
    """Every ReconcileEvent of a controller, and the reconcile that hangs on first delivery."""

    def __init__(self, hang_key: str) -> None:
        self.events: list[ReconcileEvent] = []
        self.hang_key = hang_key
        self.deliveries: dict[str, int] = defaultdict(int)

    def __call__(self, event: ReconcileEvent) -> None:
        self.events.append(event)

    async def reconcile(self, obj: KubeObject | None, ctx: Context) -> None:
        self.deliveries[ctx.key] += 1
        if ctx.key == self.hang_key and self.deliveries[ctx.key] == 1:
            await asyncio.sleep(3600)
        await asyncio.sleep(0.01)

    def of(self, kind: str, key: str | None = None) -> list[ReconcileEvent]:
        return [e for e in self.events if e.kind == kind and (key is None or e.key == key)]

    def assert_no_overlap(self) -> None:
        """No key in two reconciles at once (start .. end or cancel), tokens increasing."""
        spans: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
        open_: dict[tuple[str, int], float] = {}
        for e in self.events:
            if e.kind == "start":
                open_[(e.key, e.token)] = e.at
            else:
                spans[e.key].append((open_.pop((e.key, e.token)), e.at, e.token))
        for key, list_ in spans.items():
            list_.sort()
            for (_, end, token), (start, _, next_token) in itertools.pairwise(list_):
                assert start >= end, f"{key}: token {next_token} started before {token} ended"
                assert next_token > token


async def run_failover(
    replica_set: ReplicaSet,
    fake_apiserver: FakeApiServer,
    registry: CollectorRegistry,
    namespace: str,
    fail: Callable[[Daemon], None],
) -> tuple[Recorder, float, ReconcileEvent, Daemon, Daemon]:
    """A controller connected to the follower, one of its reconciles hung on the leader; then
    ``fail(leader)``. Returns the recorder, when the leader failed, the hung reconcile's start,
    the old leader and the survivor, once every key was reconciled on the new leader."""
    leader, survivor = await replica_set.start_pair()
    keys = seed_keys(fake_apiserver, namespace, 8)
    rec = Recorder(f"{namespace}/seed-0000003")
    async with informerd.Client.connect(survivor.target, timeout_s=10) as client:
        ctl = Controller(namespace, client, concurrency=3, registry=registry, on_reconcile=rec)
        ctl.for_("v1", "ConfigMap", namespace=namespace)
        task = asyncio.create_task(ctl.run(rec.reconcile))
        await eventually(lambda: bool(rec.of("start", rec.hang_key)), "the hung reconcile", 60)
        hung = rec.of("start", rec.hang_key)[0]
        assert client.leader_address == leader.target
        lead = await replica_set.info(leader)
        assert lead is not None
        assert hung.epoch == lead.token_epoch
        assert hung.token > hung.epoch
        assert hung.stream_id

        failed_at = time.monotonic()
        await asyncio.to_thread(fail, leader)

        def reconciled_on_the_new_leader() -> bool:
            done = {e.key for e in rec.of("end") if e.epoch > hung.epoch}
            return done >= keys

        await eventually(reconciled_on_the_new_leader, "every key on the new leader", 90)
        new = await client.admin.get_replica()
        assert new.role == ReplicaRole.LEADER
        assert new.identity == survivor.identity
        assert new.lease_transitions > lead.lease_transitions
        assert new.token_epoch > lead.token_epoch
        assert {e.epoch for e in rec.of("end") if e.epoch > hung.epoch} == {new.token_epoch}
        # The survivor is the configured target: nothing to follow any more.
        assert client.leader_address is None
        assert ctl.streams_opened >= 2
        await eventually(lambda: queue_idle(client, namespace), "the queue idle")
        ctl.stop()
        await asyncio.wait_for(task, 30)
    rec.assert_no_overlap()
    # Outcomes of the broken stream were never sent on the new one: nothing refused.
    assert not registry.get_sample_value(
        "informerd_sdk_work_refusals_total", {"controller": namespace, "reason": "KEY_NOT_HELD"}
    )
    return rec, failed_at, hung, leader, survivor


async def test_killing_the_leader_cancels_its_reconciles_at_once_and_work_goes_on(
    replica_set: ReplicaSet, fake_apiserver: FakeApiServer, registry: CollectorRegistry
) -> None:
    rec, killed_at, hung, _, _ = await run_failover(
        replica_set, fake_apiserver, registry, "ha-kill", lambda d: d.kill()
    )
    (cancel,) = [e for e in rec.of("cancel", rec.hang_key) if e.token == hung.token]
    print(f"reconcile cancelled {cancel.at - killed_at:.3f} s after the SIGKILL")
    assert cancel.at - killed_at < 5
    assert cancel.epoch == hung.epoch
    # Every reconcile in flight when the stream broke was cancelled, none ended after it.
    assert not [e for e in rec.of("end") if e.epoch == hung.epoch and e.at > cancel.at]
    again = [e for e in rec.of("start", rec.hang_key) if e.epoch > hung.epoch]
    assert again
    assert again[0].token > hung.token


async def test_a_frozen_leader_is_left_by_keepalive_and_steps_down_when_it_resumes(
    replica_set: ReplicaSet, fake_apiserver: FakeApiServer, registry: CollectorRegistry
) -> None:
    def freeze(daemon: Daemon) -> None:
        daemon.send_signal(signal.SIGSTOP)

    try:
        rec, frozen_at, hung, old, survivor = await run_failover(
            replica_set, fake_apiserver, registry, "ha-stop", freeze
        )
        (cancel,) = [e for e in rec.of("cancel", rec.hang_key) if e.token == hung.token]
        # Nothing but the client's keepalive (a ping every 2 s, 2 s to answer) notices a
        # stopped process: TCP alone would take minutes.
        print(f"reconcile cancelled {cancel.at - frozen_at:.3f} s after the SIGSTOP")
        assert cancel.at - frozen_at < 10
    finally:
        for d in replica_set.daemons:
            d.send_signal(signal.SIGCONT)

    async def stepped_down() -> bool:
        info = await replica_set.info(old)
        return (
            info is not None
            and info.role == ReplicaRole.FOLLOWER
            and info.leader == survivor.identity
        )

    await eventually(stepped_down, "the resumed leader following the new one", 60)
