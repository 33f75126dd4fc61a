"""The randomized nemesis (issue 27): a schedule of faults drawn from a seed, applied one at a
time to the chaos cluster under churn, each healed before the next, with the oracle
(oracle.py) checked at every settle point and at the end.

A fault is a kind, a duration and a pick among the replicas or workers, all from one
``random.Random(seed)``, so a seed names its schedule (the faults' timing still depends on the
machine). Kinds:

- ``kill-leader`` / ``kill-follower``: SIGKILL, restarted after the fault's duration;
- ``stop-leader`` / ``stop-follower``: SIGSTOP for the duration, then SIGCONT (a frozen VM);
- ``term-leader``: SIGTERM (graceful step-down), restarted once it exits;
- ``kill-worker``: SIGKILL of a worker process, a new one started in its place;
- ``hang-apiserver``: the kube-apiserver SIGSTOPped (every replica's requests hang);
- ``partition-leader`` / ``partition-follower``: that replica's proxy to the API server holds
  every byte both ways (its connections stay open and hang; the others' work);
- ``reset-replica``: a replica's proxy resets every connection and refuses new ones;
- ``cut-workers`` / ``reset-workers``: the leader's ingress proxy (its advertised address,
  which the workers reach it through) holds every byte / resets every connection: the workers
  are cut off from the leader, which still leads;
- ``delete-lease``: the Lease deleted by hand, as an operator might;
- ``list-burst``: a hostile client's burst of concurrent Lists at one replica;
- ``hostile``: calls of methods that do not exist (with made-up tokens), EnsureInformer naming
  clusters that are not configured, a List with a selector of 131,072 terms, and Watch streams
  that never read, left open until the next settle (bounded in threads, series, CPU and
  buffered bytes: items 11 and 14), and a round of the tenant's attacks at that replica.

Beside the faults, the whole run long, a tenant (tenant.py: a service account allowed its own
namespace and queue only) reads and attacks a random replica about once a second: the oracle
also checks that it never read outside its RBAC.

What a worker pause would break is left out on purpose: a SIGSTOPped worker resumes inside a
reconcile whose key the daemon has long given to another worker; only fencing tokens downstream
can order those, and the oracle checks those tokens separately (they rise per key).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grpc

import informerd
from informerd import ReplicaRole, kube
from informerd.informers import Watch
from informerd.testing import Daemon
from tests.chaos.cluster import LEASE_NAME, LEASE_NAMESPACE, NAMESPACE, ChaosCluster
from tests.chaos.proxy import FaultProxy, Mode
from tests.chaos.tenant import Tenant, TenantReport

KINDS = (
    "kill-leader",
    "kill-follower",
    "stop-leader",
    "stop-follower",
    "term-leader",
    "kill-worker",
    "hang-apiserver",
    "partition-leader",
    "partition-follower",
    "reset-replica",
    "cut-workers",
    "reset-workers",
    "delete-lease",
    "list-burst",
    "hostile",
)

# The most threads and resident bytes a daemon may show at any sample (items 11 and 14: no
# client makes the daemon grow without bound).
MAX_THREADS = 400
MAX_RSS_BYTES = 1536 << 20


@dataclass
class Fault:
    kind: str
    duration_s: float
    pick: int  # which replica (of the candidates) or worker
    began: float = 0.0
    ended: float = 0.0
    target: str = ""


@dataclass
class Report:
    seed: int
    budget_s: float
    faults: list[Fault] = field(default_factory=list)
    settles: int = 0
    max_threads: int = 0
    max_rss_bytes: int = 0
    tenant: TenantReport = field(default_factory=TenantReport)

    def counts(self) -> dict[str, int]:
        return dict(sorted(Counter(f.kind for f in self.faults).items()))

    def to_json(self, oracle: str, run_s: float) -> str:
        return json.dumps(
            {
                "seed": self.seed,
                "budget_s": self.budget_s,
                "run_s": round(run_s, 1),
                "faults": len(self.faults),
                "kinds": len(self.counts()),
                "by_kind": self.counts(),
                "settles": self.settles,
                "max_daemon_threads": self.max_threads,
                "max_daemon_rss_bytes": self.max_rss_bytes,
                "oracle": oracle,
                "tenant": self.tenant.to_dict(),
                "schedule": [
                    {
                        "kind": f.kind,
                        "target": f.target,
                        "duration_s": round(f.duration_s, 2),
                        "at_s": round(f.began, 2),
                    }
                    for f in self.faults
                ],
            },
            indent=2,
        )


def draw(rng: random.Random) -> Fault:
    kind = rng.choice(KINDS)
    lo, hi = {
        "stop-leader": (2.0, 12.0),
        "stop-follower": (2.0, 8.0),
        "hang-apiserver": (2.0, 10.0),
        "partition-leader": (2.0, 12.0),
        "partition-follower": (2.0, 8.0),
        "reset-replica": (0.5, 4.0),
        "cut-workers": (2.0, 10.0),
        "reset-workers": (0.5, 4.0),
        "kill-leader": (0.5, 3.0),
        "kill-follower": (0.5, 3.0),
    }.get(kind, (0.0, 0.0))
    return Fault(kind, rng.uniform(lo, hi), rng.randrange(1 << 16))


async def _proxy_fault(proxy: FaultProxy, mode: Mode, duration_s: float) -> None:
    """``proxy`` in ``mode`` for ``duration_s``, then passing again."""
    proxy.set_mode(mode)
    try:
        await asyncio.sleep(duration_s)
    finally:
        proxy.set_mode("pass")


def sample(daemon: Daemon) -> tuple[int, int]:
    """(threads, resident bytes) of a running daemon; (0, 0) when it is not running."""
    if daemon.proc is None or daemon.proc.poll() is not None:
        return 0, 0
    threads = rss = 0
    try:
        for line in Path(f"/proc/{daemon.proc.pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                threads = int(line.split()[1])
            elif line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    except OSError:
        return 0, 0
    return threads, rss


class Nemesis:
    def __init__(self, cluster: ChaosCluster, seed: int, budget_s: float) -> None:
        self.cluster = cluster
        self.rng = random.Random(seed)
        self.report = Report(seed, budget_s)
        self.started = time.monotonic()
        # Watch streams of hostile clients that never read, closed at each settle.
        self.idle_watches: list[Watch] = []
        self.idle_clients: list[informerd.Client] = []
        self.tenant = Tenant(cluster.access, cluster.tenant_token, cluster.informer_id)
        self.report.tenant = self.tenant.report
        # The tenant's own draws, apart from the schedule's: a seed names the same faults.
        self.tenant_rng = random.Random(seed + 1)

    async def _roles(self) -> tuple[Daemon | None, list[Daemon]]:
        running = self.cluster.running()
        roles = await asyncio.gather(*(self.cluster.access.role_of(d) for d in running))
        leaders = [d for d, r in zip(running, roles, strict=True) if r == ReplicaRole.LEADER]
        leader = leaders[0] if len(leaders) == 1 else None
        return leader, [d for d in self.cluster.daemons if d is not leader]

    def _measure(self) -> None:
        for d in self.cluster.daemons:
            threads, rss = sample(d)
            self.report.max_threads = max(self.report.max_threads, threads)
            self.report.max_rss_bytes = max(self.report.max_rss_bytes, rss)
            assert threads <= MAX_THREADS, f"{d.identity}: {threads} threads"
            assert rss <= MAX_RSS_BYTES, f"{d.identity}: {rss} bytes resident"

    async def apply(self, f: Fault) -> None:
        c = self.cluster
        assert c.kube is not None
        leader, followers = await self._roles()
        kind = f.kind
        if kind.endswith("-leader") and leader is None:
            kind = kind.replace("-leader", "-follower")  # nobody leads right now
        replica = (
            leader
            if kind.endswith("-leader") and leader is not None
            else followers[f.pick % len(followers)]
        )
        f.began = time.monotonic() - self.started
        if kind in ("kill-leader", "kill-follower"):
            f.target = replica.identity
            await asyncio.to_thread(replica.kill)
            await asyncio.sleep(f.duration_s)
            await asyncio.to_thread(replica.restart)
        elif kind in ("stop-leader", "stop-follower"):
            f.target = replica.identity
            replica.send_signal(signal.SIGSTOP)
            try:
                await asyncio.sleep(f.duration_s)
            finally:
                replica.send_signal(signal.SIGCONT)
        elif kind == "term-leader":
            f.target = replica.identity
            await asyncio.to_thread(replica.restart, signal.SIGTERM)
        elif kind == "kill-worker":
            n = f.pick % len(c.workers)
            f.target = f"worker{n}"
            await asyncio.to_thread(c.kill_worker, n)
        elif kind == "hang-apiserver":
            f.target = "kube-apiserver"
            os.kill(c.kube.pid, signal.SIGSTOP)
            try:
                await asyncio.sleep(f.duration_s)
            finally:
                os.kill(c.kube.pid, signal.SIGCONT)
        elif kind in ("partition-leader", "partition-follower", "reset-replica"):
            # The replica's proxy to the API server.
            f.target = replica.identity
            proxy = c.proxies[c.daemons.index(replica)]
            await _proxy_fault(proxy, "reset" if kind == "reset-replica" else "hang", f.duration_s)
        elif kind in ("cut-workers", "reset-workers"):
            # The proxy in front of the leader's advertised address, which the workers use.
            target = leader if leader is not None else replica
            f.target = target.identity
            proxy = c.ingress[c.daemons.index(target)]
            await _proxy_fault(proxy, "reset" if kind == "reset-workers" else "hang", f.duration_s)
        elif kind == "delete-lease":
            f.target = f"{LEASE_NAMESPACE}/{LEASE_NAME}"
            api = await c._kube_api()
            try:
                await kube.request(
                    api,
                    "DELETE",
                    f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{LEASE_NAME}",
                )
            except Exception as e:
                if "404" not in str(e) and "NotFound" not in str(e):  # gone already: fine
                    raise
        elif kind == "list-burst":
            f.target = replica.identity
            await self._list_burst(replica)
        elif kind == "hostile":
            f.target = replica.identity
            await self._hostile(replica)
        else:
            raise AssertionError(f"unknown fault {kind}")
        f.kind = kind
        f.ended = time.monotonic() - self.started
        self.report.faults.append(f)
        self._measure()

    async def _list_burst(self, replica: Daemon, lists: int = 100) -> None:
        with_errors = 0
        try:
            async with self.cluster.access.connect(replica.target, timeout_s=10) as client:
                cms = await client.informers.ensure("v1", "ConfigMap", namespace=NAMESPACE)
                gate = asyncio.Semaphore(25)

                async def one() -> None:
                    nonlocal with_errors
                    async with gate:
                        try:
                            await cms.list()
                        except informerd.InformerdError:
                            with_errors += 1

                await asyncio.gather(*(one() for _ in range(lists)))
        except informerd.InformerdError:
            pass  # the replica went away under another fault's after-effects: not a finding

    async def _hostile(self, replica: Daemon, calls: int = 100) -> None:
        credentials = grpc.ssl_channel_credentials(self.cluster.access.ca.read_bytes())
        async with grpc.aio.secure_channel(replica.target, credentials) as channel:
            refused = (
                grpc.StatusCode.UNIMPLEMENTED,
                grpc.StatusCode.UNAUTHENTICATED,
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.DEADLINE_EXCEEDED,
            )
            for _ in range(calls):
                method = f"/informerd.v1.Nope/Method{self.rng.randrange(1 << 30)}"
                call = channel.unary_unary(
                    method, request_serializer=bytes, response_deserializer=bytes
                )
                forged = f"Bearer {self.rng.randbytes(24).hex()}"
                code = None
                try:
                    await call(b"", timeout=2, metadata=(("authorization", forged),))
                except grpc.aio.AioRpcError as e:
                    code = e.code()
                if code not in refused:
                    raise AssertionError(f"{method}: {code}, want one of {refused}")
        await self.tenant.round(replica.target, self.tenant_rng)
        try:
            async with self.cluster.access.connect(replica.target, timeout_s=5) as client:
                cms = await client.informers.ensure("v1", "ConfigMap", namespace=NAMESPACE)
                # A selector of 131,072 terms (item 14) is refused before it costs anything.
                try:
                    await cms.list(label_selector=",".join(f"k{i}=v" for i in range(1 << 17)))
                except informerd.InvalidArgument:
                    pass
                else:
                    raise AssertionError("a List with 131,072 selector terms was accepted")
                await self._open_idle_watches(replica)
                for i in range(calls):
                    try:
                        await client.informers.ensure(
                            "v1", "ConfigMap", namespace=NAMESPACE, cluster=f"nope-{i}"
                        )
                    except (informerd.Unavailable, informerd.Timeout):
                        return  # the replica went away meanwhile
                    except informerd.InformerdError:
                        continue  # refused, as it must be
                    raise AssertionError(f"EnsureInformer of cluster nope-{i} was accepted")
        except (informerd.Unavailable, informerd.Timeout):
            pass

    async def _open_idle_watches(self, replica: Daemon, count: int = 4) -> None:
        """Watchers that read their first event and then never again (their buffers bounded in
        events and bytes), on a client of their own left open through the faults that follow,
        until the next settle."""
        client = self.cluster.access.connect(replica.target, timeout_s=5)
        self.idle_clients.append(client)
        cms = await client.informers.ensure("v1", "ConfigMap", namespace=NAMESPACE)
        for _ in range(count):
            watch = cms.watch(buffer_size=1 << 20, reconnect=False)
            await watch.__anext__()  # opened
            self.idle_watches.append(watch)

    async def _close_idle_watches(self) -> None:
        for watch in self.idle_watches:
            await watch.close()
        for client in self.idle_clients:
            await client.close()
        self.idle_watches.clear()
        self.idle_clients.clear()

    async def run(self, faults_per_settle: int = 8) -> Report:
        """Faults under churn until the budget is spent; after every ``faults_per_settle``
        faults (and at the end) the churn stops, every fault is healed, and the cluster must
        converge: every object reconciled at its last version, the queue idle, one leader, the
        oracle holding over everything recorded so far."""
        c = self.cluster
        deadline = self.started + self.report.budget_s
        tenant = asyncio.create_task(self._tenant_rounds())
        try:
            while time.monotonic() < deadline:
                async with c.churning():
                    for _ in range(faults_per_settle):
                        if time.monotonic() >= deadline:
                            break
                        await self.apply(draw(self.rng))
                        await self.cluster.heal()
                        await asyncio.sleep(self.rng.uniform(0.5, 3.0))
                await self.cluster.heal()
                await self._close_idle_watches()
                await c.converge()
                if tenant.done():
                    tenant.result()  # its failure, raised here
                self.tenant.check()
                self.report.settles += 1
                self._measure()
        finally:
            tenant.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await tenant
        self.tenant.check()
        return self.report

    async def _tenant_rounds(self, interval_s: float = 1.0) -> None:
        """The tenant's reads and attacks at a random running replica, about every
        ``interval_s``, whatever fault is on, until cancelled."""
        while True:
            running = self.cluster.running()
            if running:
                replica = running[self.tenant_rng.randrange(len(running))]
                await self.tenant.round(replica.target, self.tenant_rng)
            await asyncio.sleep(interval_s)
