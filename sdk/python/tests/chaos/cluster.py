"""The chaos tests' cluster: a real kube-apiserver, the Queue CRD, three informerd replicas on
one Lease, each reaching the API server through its own fault-injecting proxy (proxy.py), an
informer-bound queue over the ConfigMaps of one namespace, two oracle worker processes (SDK
controllers) on a replica that does not lead, and a churn process. Each replica also has an
ingress proxy in front of its gRPC port, which it advertises: the workers reach the leader
through it, so the nemesis can cut the workers off from the leader alone.

The replicas run as in production: TLS, every caller authenticated by TokenReview and
authorized by SubjectAccessReview against the API server (through the same proxies, so the
faults reach the reviews too), with the default decision caches. Every caller has its own
identity: the harness is the cluster's admin, the workers a service account bound to the
ConfigMaps of their namespace and their queue, and a tenant (tenant.py) a service account bound
to its own namespace and queue only.

Every process is real and is stopped by its pid: the daemons and workers are children; the
kube-apiserver is not (``KubeApiServer.close`` signals its pid).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient

import informerd
from informerd import ReplicaRole, kube
from informerd.queues import object_source, queue_spec
from informerd.testing import Daemon, KubeApiServer, LeaderElection, eventually, repo_root
from informerd.testing.pki import Pki
from tests.chaos.oracle import Records
from tests.chaos.proxy import FaultProxy
from tests.rbac import (
    binding,
    configmap,
    kubeconfig_token,
    namespace,
    queue_role,
    role,
    sa_token,
    service_account,
)

NAMESPACE = "chaos"
LEASE_NAMESPACE = "informerd"
LEASE_NAME = "chaos"
QUEUE = "chaos"
# The workers' service account (in NAMESPACE).
WORKER_ACCOUNT = "worker"
# A tenant sharing the daemons: a service account allowed its own namespace and queue only.
TENANT_NAMESPACE = "tenant"
TENANT_ACCOUNT = "intruder"
TENANT_QUEUE = "tenant-q"
TENANT_OBJECTS = 20
INFORMER_ALIAS = "chaos-configmaps"
WORKER = Path(__file__).parents[1] / "workers" / "oracle_worker.py"
CHURN = Path(__file__).parent / "churn.py"
# The Rust SDK's oracle worker (sdk/rust/informerd/examples/oracle_worker.rs), when built.
RUST_WORKER_ENV = "INFORMERD_RUST_ORACLE_WORKER"

# The SDK's keepalive (connection.py): a ping every 2 s, 2 s to answer. A Work stream on a
# frozen leader breaks within about this long, and its reconciles are cancelled.
KEEPALIVE_DETECTION_S = 4.0

CONFIGMAPS = kube.Resource("v1", "ConfigMap", "configmaps", namespaced=True)
NAMESPACES = kube.Resource("v1", "Namespace", "namespaces", namespaced=False)
QUEUES = kube.Resource("informerd.io/v1alpha1", "Queue", "queues", namespaced=True)


@dataclass(frozen=True)
class Timings:
    """Leader election timings (lease duration > renew deadline > retry period).

    Exclusion across failover (docs/high-availability.md) needs the old leader's workers to
    cancel their reconciles before another replica can take the Lease: at the old leader's
    step-down (renew deadline after its last renewal, before the lease duration), or by keepalive
    (``KEEPALIVE_DETECTION_S`` after it froze). Another replica takes the Lease at the earliest a
    lease duration after the last renewal it saw, and the frozen leader renewed at most a retry
    period before it froze: so lease - retry must exceed the keepalive detection."""

    lease_s: float
    renew_s: float
    retry_s: float

    def __post_init__(self) -> None:
        if not self.lease_s > self.renew_s > self.retry_s > 0:
            raise ValueError(f"{self}: want lease > renew deadline > retry period > 0")
        if self.lease_s - self.retry_s <= KEEPALIVE_DETECTION_S:
            raise ValueError(f"{self}: lease - retry must exceed {KEEPALIVE_DETECTION_S} s")

    def election(self) -> LeaderElection:
        return LeaderElection(
            LEASE_NAMESPACE,
            LEASE_NAME,
            lease_duration_s=self.lease_s,
            renew_deadline_s=self.renew_s,
            retry_period_s=self.retry_s,
        )


#: client-go's defaults (the daemon's): the long version.
CLIENT_GO = Timings(15, 10, 2)
#: `make test`'s short version: failovers in seconds, the same inequalities.
SHORT = Timings(8, 5, 1)


def configmap_name(i: int) -> str:
    return f"chaos-{i:04d}"  # as churn.py names them


async def until(
    condition: Callable[[], bool | Awaitable[bool]],
    what: str,
    timeout_s: float,
    detail: Callable[[], str] = lambda: "",
    interval_s: float = 0.25,
) -> None:
    """``informerd.testing.eventually`` whose failure also says ``detail()``."""
    try:
        await eventually(condition, what, timeout_s, interval_s=interval_s)
    except AssertionError as e:
        raise AssertionError(f"{e}. {detail()}") from None


@dataclass(frozen=True)
class Access:
    """How a caller reaches the replicas: TLS verified against the test CA, and a bearer token
    (the cluster admin's unless another is given)."""

    ca: Path
    token: str

    def connect(
        self, target: str, timeout_s: float = 10, token: str | None = None
    ) -> informerd.Client:
        return informerd.Client.connect(
            target, root_certificates=self.ca, token=token or self.token, timeout_s=timeout_s
        )

    async def replica_info(self, daemon: Daemon, timeout_s: float = 2) -> informerd.Replica | None:
        """The daemon's Admin.GetReplica, or None when it does not answer (stopped, or dead,
        or unable to review the call: its API server out of reach and the decision not cached)."""
        async with self.connect(daemon.target, timeout_s=timeout_s) as client:
            try:
                return await client.admin.get_replica()
            except (informerd.Unavailable, informerd.Timeout):
                return None

    async def role_of(self, daemon: Daemon) -> ReplicaRole | None:
        info = await self.replica_info(daemon, timeout_s=1)
        return None if info is None else info.role


async def settled_leader(
    access: Access,
    daemons: list[Daemon],
    timeout_s: float,
    advertised: Callable[[Daemon], str] = lambda d: d.target,
) -> Daemon:
    """Waits until every one of ``daemons`` answers, one of them leads and the others follow
    it (naming its address, ``advertised(leader)``); returns the leader."""
    leaders: list[Daemon] = []

    async def settled() -> bool:
        infos = await asyncio.gather(*(access.replica_info(d) for d in daemons))
        if any(i is None for i in infos):
            return False
        leaders[:] = [
            d for d, i in zip(daemons, infos, strict=True) if i and i.role == ReplicaRole.LEADER
        ]
        return len(leaders) == 1 and all(
            i.role == ReplicaRole.FOLLOWER and i.leader_address == advertised(leaders[0])
            for d, i in zip(daemons, infos, strict=True)
            if i is not None and d is not leaders[0]
        )

    await until(settled, "one leader, the other replicas following it", timeout_s)
    return leaders[0]


class ChaosCluster:
    def __init__(self, workdir: Path, objects: int, timings: Timings) -> None:
        self.workdir = workdir
        self.objects = objects
        self.timings = timings
        self.kube: KubeApiServer | None = None
        self.daemons: list[Daemon] = []
        self.workers: list[subprocess.Popen[bytes]] = []
        # Each replica's proxy to the API server, by the replica's index.
        self.proxies: list[FaultProxy] = []
        # Each replica's ingress: a proxy in front of its gRPC port, which it advertises, so
        # that workers reach the leader through it (the harness's own calls go direct).
        self.ingress: list[FaultProxy] = []
        self.worker_target: Daemon | None = None
        self.records = Records([workdir / "w0.rec", workdir / "w1.rec"])
        self.churns = 0
        # The harness's access (the cluster admin) and the credentials it hands out, once the
        # API server runs.
        self.access = Access(Path(), "")
        self.worker_token_file = workdir / "worker.token"
        self.tenant_token = ""
        self.informer_id = ""  # the workers' informer, once the queue is made
        self._stack = contextlib.ExitStack()

    # --- start and stop ---------------------------------------------------------------------

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        started = time.monotonic()
        self.kube = KubeApiServer.start(self.workdir / "kube")
        self._stack.callback(self._close_kube)
        pki = Pki(self.workdir / "pki")
        ca = pki.ca("ca")
        serving = pki.server_cert("replicas", ca)  # 127.0.0.1: every replica and proxy
        self.access = Access(ca.cert, kubeconfig_token(self.kube.kubeconfig))
        asyncio.run(self._seed())
        seeded = time.monotonic()
        config = (
            "informers:\n"
            f"  - {{name: {INFORMER_ALIAS}, apiVersion: v1, kind: ConfigMap, "
            f"namespace: {NAMESPACE}}}\n"
        )
        kubeconfig = self.kube.kubeconfig.read_text()
        server = re.search(r"server:\s*https://([^:/\s]+):(\d+)", kubeconfig)
        assert server is not None, f"no server in {self.kube.kubeconfig}"
        for i in range(3):
            d = self.workdir / f"replica{i}"
            d.mkdir()
            proxy = FaultProxy(server.group(1), int(server.group(2)))
            self.proxies.append(proxy)
            self._stack.callback(proxy.close)
            proxied = d / "kubeconfig"
            proxied.write_text(
                kubeconfig.replace(
                    server.group(0), f"server: https://{server.group(1)}:{proxy.port}"
                )
            )
            ingress = FaultProxy("127.0.0.1", 0)  # its upstream once the replica has a port
            self.ingress.append(ingress)
            self._stack.callback(ingress.close)
            daemon = Daemon.start(
                proxied,
                d,
                config_yaml=config,
                leader_election=self.timings.election(),
                extra_args=[
                    f"--advertise_address=127.0.0.1:{ingress.port}",
                    f"--tls_cert={serving.cert}",
                    f"--tls_key={serving.key}",
                ],
                insecure=False,
            )
            ingress.upstream = ("127.0.0.1", daemon.port)  # restarts keep the port
            self.daemons.append(daemon)
            self._stack.callback(daemon.close)
        self.worker_target = asyncio.run(self._create_queue())
        self._stack.callback(self._stop_workers)
        for n in range(2):
            self.workers.append(self._spawn_worker(n))
        asyncio.run(self.converge())
        print(
            f"chaos cluster: kube-apiserver and {self.objects} ConfigMaps in "
            f"{seeded - started:.1f} s, replicas, queue and workers converged in "
            f"{time.monotonic() - seeded:.1f} s"
        )

    def worker_program(self, n: int) -> list[str]:
        """Worker 1 is the Rust SDK's oracle worker when ``INFORMERD_RUST_ORACLE_WORKER`` names
        it (``make chaos`` builds it), so that both SDKs' controllers share the queue; else both
        are Python's."""
        rust = os.environ.get(RUST_WORKER_ENV, "")
        if n == 1 and rust:
            return [rust]
        return [sys.executable, str(WORKER)]

    def _spawn_worker(self, n: int) -> subprocess.Popen[bytes]:
        assert self.worker_target is not None
        with (self.workdir / f"worker{n}.log").open("ab") as log:
            return subprocess.Popen(
                [
                    *self.worker_program(n),
                    *("--target", self.advertised(self.worker_target)),
                    *("--ca", str(self.access.ca), "--token-file", str(self.worker_token_file)),
                    *("--namespace", NAMESPACE, "--queue", QUEUE),
                    *("--out", str(self.workdir / f"w{n}.rec")),  # appended to
                    *("--sleep", "0.02", "--concurrency", "4"),
                    "--record-versions",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def kill_worker(self, n: int) -> None:
        """SIGKILLs worker ``n`` and starts a new one in its place (same record file). Its
        reconciles still open end at the kill for the oracle: a dead process reconciles
        nothing, and the daemon gives its keys to others only once the process is gone."""
        w = self.workers[n]
        killed_at = time.monotonic()
        w.kill()
        w.wait()
        self.records.update().process_died(w.pid, killed_at)
        self.workers[n] = self._spawn_worker(n)

    def close(self) -> None:
        self._stack.close()

    def finish(self) -> None:
        """Drains the workers (SIGTERM) and checks what they counted as they exited: the oracle
        once more, and no refusal (each worker's X line)."""
        self._stop_workers()
        records = self.records.update()
        assert sorted(records.refusal_counts) == sorted(w.pid for w in self.workers), (
            f"exit records of {sorted(records.refusal_counts)}, workers {self.workers}"
        )
        records.check()

    def _close_kube(self) -> None:
        assert self.kube is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.kube.pid, signal.SIGCONT)
        self.kube.close()

    def _stop_workers(self) -> None:
        for w in self.workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
        for w in self.workers:
            try:
                w.wait(30)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()

    async def _kube_api(self) -> ApiClient:
        assert self.kube is not None
        return await kube_config.new_client_from_config(config_file=str(self.kube.kubeconfig))

    async def _seed(self) -> None:
        api = await self._kube_api()
        try:
            root = repo_root(Path(__file__))
            assert root is not None
            await kube.apply_manifest(api, root / "deploy" / "crd" / "queues.informerd.io.yaml")
            for ns in (LEASE_NAMESPACE, NAMESPACE, TENANT_NAMESPACE):
                await kube.apply(
                    api, namespace(ns), field_manager="chaos-test", resource=NAMESPACES
                )
            await kube.apply_manifest(
                api,
                [
                    # The workers: the ConfigMaps of their namespace and their queue (the
                    # controllers make sure it exists with UpdateQueue(allow_missing)).
                    role(NAMESPACE, "configmaps", ["configmaps"], ["get", "list", "watch"]),
                    binding(
                        NAMESPACE,
                        "workers",
                        "configmaps",
                        [service_account(NAMESPACE, WORKER_ACCOUNT)],
                        cluster=False,
                    ),
                    queue_role("chaos-workers", [QUEUE], ["get", "work", "update", "create"]),
                    binding(
                        "",
                        "chaos-workers",
                        "chaos-workers",
                        [service_account(NAMESPACE, WORKER_ACCOUNT)],
                        cluster=True,
                    ),
                    # The tenant: its own namespace's ConfigMaps and its own queue.
                    role(TENANT_NAMESPACE, "configmaps", ["configmaps"], ["get", "list", "watch"]),
                    binding(
                        TENANT_NAMESPACE,
                        "tenant",
                        "configmaps",
                        [service_account(TENANT_NAMESPACE, TENANT_ACCOUNT)],
                        cluster=False,
                    ),
                    queue_role(
                        "tenant", [TENANT_QUEUE], ["get", "work", "update", "create", "delete"]
                    ),
                    binding(
                        "",
                        "tenant",
                        "tenant",
                        [service_account(TENANT_NAMESPACE, TENANT_ACCOUNT)],
                        cluster=True,
                    ),
                    *(
                        configmap(TENANT_NAMESPACE, f"tenant-{i:02d}")
                        for i in range(TENANT_OBJECTS)
                    ),
                ],
            )
            # Tokens for the whole run (the workers re-read their file; it does not rotate).
            day = 24 * 3600
            self.worker_token_file.write_text(
                await sa_token(api, NAMESPACE, WORKER_ACCOUNT, seconds=day)
            )
            self.tenant_token = await sa_token(api, TENANT_NAMESPACE, TENANT_ACCOUNT, seconds=day)
            gate = asyncio.Semaphore(16)

            async def create(i: int) -> None:
                async with gate:
                    await kube.request(
                        api,
                        "POST",
                        CONFIGMAPS.path(namespace=NAMESPACE),
                        body={
                            "apiVersion": "v1",
                            "kind": "ConfigMap",
                            "metadata": {"name": configmap_name(i), "namespace": NAMESPACE},
                            "data": {"n": "0"},
                        },
                    )

            await asyncio.gather(*(create(i) for i in range(self.objects)))
        finally:
            await api.close()

    async def _create_queue(self) -> Daemon:
        """Creates the queue over the API through a follower (the call follows the leader);
        returns that follower, the workers' target."""
        leader = await settled_leader(self.access, self.daemons, 120, self.advertised)
        follower = next(d for d in self.daemons if d is not leader)
        async with self.access.connect(follower.target, timeout_s=20) as client:
            cms = await client.informers.ensure("v1", "ConfigMap", namespace=NAMESPACE)
            await cms.wait_for_sync(timeout_s=60)
            self.informer_id = cms.id
            await client.queues.create(queue_spec(QUEUE, [object_source(cms)]))
            assert client.leader_address == self.advertised(leader)
        # The leader kept the spec as a Queue object, for the next leaders.
        api = await self._kube_api()
        try:
            stored = await kube.get(api, QUEUES, QUEUE, namespace=LEASE_NAMESPACE)
        finally:
            await api.close()
        assert stored["metadata"]["labels"]["informerd.io/lease"] == LEASE_NAME
        assert stored["spec"]["name"] == QUEUE
        return follower

    # --- state ----------------------------------------------------------------------------

    def advertised(self, daemon: Daemon) -> str:
        """The address ``daemon`` advertises: its ingress proxy's."""
        return f"127.0.0.1:{self.ingress[self.daemons.index(daemon)].port}"

    def running(self) -> list[Daemon]:
        return [d for d in self.daemons if d.proc is not None and d.proc.poll() is None]

    def processes(self) -> str:
        """The replicas' and workers' states, for failure messages (a process that died of a
        signal nobody in the test sent shows here)."""

        def state(proc: subprocess.Popen[bytes] | None) -> str:
            code = None if proc is None else proc.poll()
            return "running" if code is None else f"exited {code}"

        return "; ".join(
            [f"{d.identity}: {state(d.proc)}" for d in self.daemons]
            + [f"worker {w.pid}: {state(w)}" for w in self.workers]
        )

    def check_workers(self) -> None:
        for n, w in enumerate(self.workers):
            assert w.poll() is None, (
                f"worker {n} exited with {w.returncode}: "
                f"{(self.workdir / f'worker{n}.log').read_text()[-3000:]}"
            )

    async def leader(self) -> Daemon:
        """The leader, once every running replica agrees on it."""
        return await settled_leader(
            self.access, self.running(), timeout_s=120, advertised=self.advertised
        )

    async def replica(self, daemon: Daemon) -> informerd.Replica:
        info = await self.access.replica_info(daemon, timeout_s=5)
        assert info is not None, f"{daemon.identity} does not answer"
        return info

    async def final_versions(self) -> dict[str, str]:
        """Every ConfigMap's resourceVersion now, from the API server: key -> rv."""
        api = await self._kube_api()
        try:
            listed = await kube.request(api, "GET", CONFIGMAPS.path(namespace=NAMESPACE))
        finally:
            await api.close()
        items = listed["items"]
        assert len(items) == self.objects
        return {
            f"{NAMESPACE}/{o['metadata']['name']}": o["metadata"]["resourceVersion"] for o in items
        }

    async def heal(self) -> None:
        """Ends every fault: the API server and every replica continued, every proxy passing,
        a replica that is not running started again."""
        assert self.kube is not None
        os.kill(self.kube.pid, signal.SIGCONT)
        for p in self.proxies + self.ingress:
            p.set_mode("pass")
        for d in self.daemons:
            d.send_signal(signal.SIGCONT)
            if d.proc is None or d.proc.poll() is not None:
                await asyncio.to_thread(d.restart)

    async def prepare(self) -> Daemon:
        """Before a scenario: every replica running (a killed one restarted, a stopped one
        continued), one leader that is not the workers' target (it hands leadership on with
        SIGTERM if it is), both workers attached to it. Returns the leader."""
        await self.heal()
        self.check_workers()
        leader = await self.leader()
        if leader is self.worker_target:
            await asyncio.to_thread(leader.stop, signal.SIGTERM)
            leader = await self.leader()
            await asyncio.to_thread(self.worker_target.restart)
            leader = await self.leader()
        await self.workers_attached(leader)
        return leader

    async def workers_attached(self, leader: Daemon) -> None:
        async with self.access.connect(leader.target, timeout_s=5) as client:

            async def attached() -> bool:
                try:
                    info = await client.queues.get(QUEUE)
                except informerd.InformerdError:
                    return False
                return info.state.workers == len(self.workers)

            await until(attached, f"both workers on the leader {leader.identity}", 120)

    async def converge(self, timeout_s: float = 240) -> Daemon:
        """Waits until one leader leads, every ConfigMap's last version was reconciled (a
        reconcile that saw it ended) and the queue is idle; then checks the oracle. Returns the
        leader."""
        self.check_workers()
        leader = await self.leader()
        final = await self.final_versions()

        def reconciled() -> bool:
            return not self.records.update().unreconciled(final)

        def missing() -> str:
            left = self.records.unreconciled(final)
            return f"{len(left)} not reconciled at their last version, e.g. {left[:5]}"

        await until(reconciled, "every object reconciled after its last change", timeout_s, missing)
        async with self.access.connect(leader.target, timeout_s=5) as client:

            async def idle() -> bool:
                s = (await client.queues.get(QUEUE)).state
                return s.depth == 0 and s.in_flight == 0 and s.delayed == 0

            await until(idle, "the queue idle", timeout_s)
        self.records.update().check()
        self.check_workers()
        return leader

    # --- faults and load ---------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def churning(self, rate: float = 30) -> AsyncIterator[Path]:
        """Runs the churn process (``rate`` changes/s) while the block runs; yields its log."""
        assert self.kube is not None
        self.churns += 1
        out = self.workdir / f"churn{self.churns}.log"
        with (self.workdir / f"churn{self.churns}.stderr").open("wb") as err:
            proc = subprocess.Popen(  # noqa: ASYNC220 (returns at once)
                [
                    sys.executable,
                    str(CHURN),
                    *("--kubeconfig", str(self.kube.kubeconfig)),
                    *("--namespace", NAMESPACE, "--count", str(self.objects)),
                    *("--rate", str(rate), "--out", str(out)),
                ],
                stdout=err,
                stderr=subprocess.STDOUT,
            )
        try:

            def changes() -> int:
                if not out.exists():
                    return 0
                return sum(1 for line in out.read_text().splitlines() if line.startswith("U"))

            await until(lambda: changes() >= 10, "the churn changing ConfigMaps", 60)
            yield out
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(proc.wait, 60)
            except subprocess.TimeoutExpired:
                proc.kill()
                await asyncio.to_thread(proc.wait)
        tail = out.read_text().splitlines()[-1:] if out.exists() else []
        assert tail, "churn wrote nothing"
        assert tail[0].startswith("D "), f"churn did not finish cleanly: {tail}"

    async def first_delivery_after(self, at: float, epoch: int, timeout_s: float = 120) -> float:
        """Seconds from ``at`` to the first key a leader after the term ``epoch`` delivered
        (the first reconcile start of a lease of a later term)."""

        def delivered() -> bool:
            return self.records.update().first_start(at, epoch) is not None

        await until(delivered, "a key delivered by the new leader", timeout_s)
        first = self.records.first_start(at, epoch)
        assert first is not None
        return first.start - at

    async def wait_for_role(
        self, candidates: list[Daemon], role: ReplicaRole, timeout_s: float
    ) -> tuple[Daemon, float]:
        """Polls until one of ``candidates`` has ``role``; returns it and when it was seen."""
        found: list[Daemon] = []

        async def any_has_it() -> bool:
            roles = await asyncio.gather(*(self.access.role_of(d) for d in candidates))
            found[:] = [d for d, r in zip(candidates, roles, strict=True) if r == role]
            return bool(found)

        await until(any_has_it, f"a replica with role {role.name}", timeout_s, interval_s=0.1)
        return found[0], time.monotonic()
