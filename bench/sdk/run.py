"""`make bench-sdk`: informerd's Python SDK beside its floors (bare grpcio workers), kopf and the
official ``kubernetes`` client, in one run. Prints the table and writes the shared row format
({"rows": [...], "raw": {...}}) to --out. What each row measures: bench/sdk/README.md.

Every contender runs as its own process (bench/sdk/*_worker.py), so that RSS (VmHWM from
/proc/PID/status) and CPU (/proc/PID/stat) are per process. Sizes and durations are arguments:
the defaults are the issue's; develop with e.g. ``--keys 20000 --configmaps 500``.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import informerd
from informerd.queues import object_source, queue_spec
from informerd.testing import Daemon, FakeApiServer, KubeApiServer

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
import proc  # noqa: E402

SHAPES = ((1, 8), (16, 64), (128, 512))  # (batch, in flight)
FLOORS = ("sync", "aio")
CM_NAMESPACE = "bench-cms"


# --- rows ---------------------------------------------------------------------------------


@dataclass
class Table:
    rows: list[dict[str, Any]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)

    def row(
        self,
        name: str,
        unit: str,
        ours: float,
        ref: float,
        ref_name: str,
        target: float,
        higher_is_better: bool,
    ) -> None:
        """A row; ``advantage`` is "times better than the reference" (rates: ours / ref;
        costs: ref / ours)."""
        advantage = (
            (ours / ref if higher_is_better else ref / ours) if ours > 0 and ref > 0 else 0.0
        )
        self.rows.append(
            {
                "name": name,
                "unit": unit,
                "informerd": round(ours, 3),
                "reference": round(ref, 3),
                "reference_name": ref_name,
                "advantage": round(advantage, 3),
                "target": target,
            }
        )

    def write(self, out: Path) -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w") as f:
            json.dump({"rows": self.rows, "raw": self.raw}, f, indent=2)
            f.write("\n")

    def print(self) -> None:
        width = max(len(r["name"]) for r in self.rows)
        print(
            f"{'row':<{width}}  {'unit':>8}  {'informerd':>12}  {'reference':>12}  "
            f"{'vs':<40} {'advantage':>9}  {'target':>6}  ok"
        )
        met = targeted = 0
        for r in self.rows:
            ok = "-"
            if r["target"]:
                targeted += 1
                good = r["advantage"] >= r["target"]
                met += good
                ok = "yes" if good else "NO"
            print(
                f"{r['name']:<{width}}  {r['unit']:>8}  {r['informerd']:>12,.2f}  "
                f"{r['reference']:>12,.2f}  {r['reference_name']:<40} {r['advantage']:>9.3f}  "
                f"{r['target']:>6.2f}  {ok}"
            )
        print(f"{met} of {targeted} targeted rows meet their target")


# --- worker processes ---------------------------------------------------------------------


class Worker:
    """A worker process: its stdout read on a thread (``ready``, ``seen KEY``, ``result``), its
    stderr to a log file."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        logdir: Path,
        on_seen: Callable[[str], None] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.log = logdir / f"{name}.log"
        self._on_seen = on_seen
        self.ready = threading.Event()
        self.result: dict[str, Any] | None = None
        self.ended = threading.Event()
        with self.log.open("wb") as err:
            self.proc = subprocess.Popen(
                list(argv),
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env={**os.environ, **(env or {})},
            )
        self._reader = threading.Thread(target=self._read, name=f"read {name}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            if line.startswith(proc.SEEN):
                if self._on_seen is not None:
                    self._on_seen(line[len(proc.SEEN) :])
            elif line == proc.READY:
                self.ready.set()
            elif line.startswith(proc.RESULT):
                self.result = json.loads(line[len(proc.RESULT) :])
        self.ended.set()

    def _fail(self, what: str) -> None:
        self.stop()
        tail = self.log.read_text(errors="replace")[-2000:]
        sys.exit(f"bench-sdk: {self.name} {what}; its log ({self.log}):\n{tail}")

    def wait_ready(self, timeout_s: float) -> None:
        if not self.ready.wait(timeout_s):
            self._fail(f"not ready within {timeout_s} s")

    def wait_result(self, timeout_s: float) -> dict[str, Any]:
        if not self.ended.wait(timeout_s):
            self._fail(f"gave no result within {timeout_s} s")
        self.proc.wait(timeout=30)
        if self.result is None:
            self._fail(f"ended ({self.proc.returncode}) without a result")
        assert self.result is not None
        return self.result

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        self.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def python(script: str, *args: str) -> list[str]:
    return [sys.executable, str(HERE / script), *args]


# --- floors and the SDK on a pre-filled queue ---------------------------------------------


async def prefill(client: informerd.Client, informer_id: str, queue: str, keys: int) -> None:
    """A fresh queue bound to the (empty) informer the controller watches, holding ``keys``
    keys: the spec the SDK's controller would create, so that its UpdateQueue changes nothing."""
    spec = queue_spec(queue, [object_source(informer_id)])
    if await _exists(client, queue):
        await client.queues.delete(queue)
    await client.queues.create(spec)
    step = 10_000  # the most keys one Add takes
    for start in range(0, keys, step):
        names = [f"empty/k{i}" for i in range(start, min(keys, start + step))]
        await client.queues.add(queue, names, timeout_s=60)


async def _exists(client: informerd.Client, queue: str) -> bool:
    try:
        await client.queues.get(queue)
    except informerd.NotFound:
        return False
    return True


async def throughput(args: argparse.Namespace, table: Table, daemon: Daemon, logdir: Path) -> None:
    client = informerd.Client.connect(daemon.target)
    try:
        informer = await client.informers.ensure("v1", "ConfigMap", namespace="bench-empty")
        await informer.wait_for_sync(timeout_s=60)
        for batch, in_flight in SHAPES:
            keys = args.keys_batch1 if batch == 1 else args.keys
            contenders: list[tuple[str, list[str]]] = [
                (
                    f"floor-{api}",
                    python(
                        "floor_worker.py",
                        f"--api={api}",
                        f"--batch={batch}",
                        f"--in-flight={in_flight}",
                        f"--object-informer={informer.id}",
                    ),
                )
                for api in FLOORS
            ]
            contenders.append(
                (
                    "sdk",
                    python(
                        "sdk_worker.py",
                        "--namespace=bench-empty",
                        f"--concurrency={in_flight}",
                        f"--max-batch={batch}",
                    ),
                )
            )
            # Contenders alternate within each repetition, so that drift in the machine's load
            # hits them alike; each row is the median of its repetitions.
            runs: dict[str, list[float]] = {name: [] for name, _ in contenders}
            for rep in range(args.repetitions):
                for name, argv in contenders:
                    queue = f"tput-{name}-{batch}"
                    await prefill(client, informer.id, queue, keys)
                    w = Worker(
                        f"{queue}.{rep}",
                        [*argv, f"--target={daemon.target}", f"--queue={queue}", f"--keys={keys}"],
                        logdir,
                    )
                    r = await asyncio.to_thread(w.wait_result, args.timeout)
                    await client.queues.delete(queue)
                    table.raw.setdefault(queue, []).append(r)
                    runs[name].append(r["keys_per_second"])
                    print(
                        f"  {queue}: {r['keys_per_second']:,.0f} keys/s over {r['keys']} keys",
                        flush=True,
                    )
            rates = {name: statistics.median(v) for name, v in runs.items()}
            best = max(rates[f"floor-{api}"] for api in FLOORS)
            best_name = max(FLOORS, key=lambda api: rates[f"floor-{api}"])
            shape = f"batch {batch}, {in_flight} in flight"
            table.row(
                f"SDK no-op controller drain, {shape}",
                "keys/s",
                rates["sdk"],
                best,
                f"best bare grpcio floor ({best_name})",
                0.25 if batch == 1 else 0.5,
                True,
            )
            if batch == 128:
                table.row(
                    f"SDK no-op controller drain, {shape} (absolute)",
                    "keys/s",
                    rates["sdk"],
                    100_000,
                    "target 100k keys/s",
                    1.0,
                    True,
                )
            for api in FLOORS:
                rate = rates[f"floor-{api}"]
                table.row(
                    f"floor: bare grpcio ({api}) drain, {shape}",
                    "keys/s",
                    rate,
                    rate,
                    "itself",
                    0.0,
                    True,
                )
    finally:
        await client.close()


# --- change → reconcile entry -------------------------------------------------------------


def make_changes(
    url: str, namespace: str, names: list[str], rate: float, seconds: float, threads: int
) -> float:
    """Merge-patches ConfigMaps at ``rate``/s for ``seconds``, each stamped with its send time
    (data.ts), on ``threads`` keep-alive connections; returns the rate made."""
    parsed = urllib.parse.urlparse(url)
    made = [0] * threads

    def changer(index: int) -> None:
        conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port, timeout=30)
        conn.connect()
        assert conn.sock is not None
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        per_thread = rate / threads
        start = time.monotonic()
        sent = 0
        obj = index
        while time.monotonic() - start < seconds:
            delay = start + sent / per_thread - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            name = names[obj % len(names)]
            obj += threads
            body = json.dumps({"data": {"ts": proc.stamp()}})
            conn.request(
                "PATCH",
                f"/api/v1/namespaces/{namespace}/configmaps/{name}",
                body,
                {"Content-Type": "application/merge-patch+json"},
            )
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                raise RuntimeError(f"PATCH {name}: HTTP {resp.status}")
            sent += 1
        made[index] = sent
        conn.close()

    begin = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        for f in [pool.submit(changer, i) for i in range(threads)]:
            f.result()
    return sum(made) / (time.monotonic() - begin)


async def wait_idle(client: informerd.Client, queue: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        s = (await client.queues.get(queue)).state
        if s.depth == 0 and s.in_flight == 0 and s.delayed == 0:
            return
        if time.monotonic() > deadline:
            sys.exit(f"bench-sdk: queue {queue} not idle within {timeout_s} s")
        await asyncio.sleep(0.05)


async def latency(
    args: argparse.Namespace, table: Table, api: FakeApiServer, daemon: Daemon, logdir: Path
) -> None:
    namespace = "bench-changes"
    api.seed("configmaps", namespace, args.change_objects)
    names = [
        o["metadata"]["name"]
        for o in api.request("GET", f"/api/v1/namespaces/{namespace}/configmaps")["items"]
    ]
    client = informerd.Client.connect(daemon.target)
    p99: dict[str, float] = {}
    try:
        informer = await client.informers.ensure("v1", "ConfigMap", namespace=namespace)
        await informer.wait_for_sync(timeout_s=60)
        contenders = {
            "floor": python(
                "floor_worker.py",
                "--api=sync",
                "--batch=16",
                "--in-flight=64",
                f"--object-informer={informer.id}",
            ),
            "sdk": python("sdk_worker.py", f"--namespace={namespace}", "--concurrency=64"),
        }
        for name, argv in contenders.items():
            queue = f"latency-{name}"
            await client.queues.create(queue_spec(queue, [object_source(informer)]))
            w = Worker(
                queue, [*argv, f"--target={daemon.target}", f"--queue={queue}", "--latency"], logdir
            )
            await asyncio.to_thread(w.wait_ready, args.timeout)
            await wait_idle(client, queue, args.timeout)  # the initial list's keys
            made = await asyncio.to_thread(
                make_changes, api.url, namespace, names, args.change_rate, args.change_seconds, 2
            )
            await asyncio.sleep(1)
            await wait_idle(client, queue, args.timeout)
            w.terminate()
            r = await asyncio.to_thread(w.wait_result, args.timeout)
            await client.queues.delete(queue)
            r["changes_per_second"] = made
            table.raw[queue] = r
            lat = r.get("latency") or proc.percentiles_us([])
            p99[name] = lat["p99_us"] / 1e3
            print(
                f"  {queue}: {made:,.0f} changes/s, {lat['count']} timed, "
                f"p50 {lat['p50_us'] / 1e3:.2f} ms p99 {lat['p99_us'] / 1e3:.2f} ms",
                flush=True,
            )
            table.row(
                f"change → reconcile entry p50 at {args.change_rate:.0f}/s ({name})",
                "ms",
                lat["p50_us"] / 1e3,
                lat["p50_us"] / 1e3,
                "itself",
                0.0,
                False,
            )
        over = max(p99["sdk"] - p99["floor"], 1e-3)
        table.row(
            f"change → reconcile entry p99 at {args.change_rate:.0f}/s: SDK minus floor",
            "ms",
            over,
            2.0,
            f"limit 2 ms (floor p99 {p99['floor']:.2f} ms)",
            1.0,
            False,
        )
    finally:
        await client.close()


# --- 10k ConfigMaps on the real kube-apiserver --------------------------------------------


def create_configmaps(kubeconfig: Path, count: int) -> None:
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
    api.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=CM_NAMESPACE)))

    def create(i: int) -> None:
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=f"cm-{i:06d}"), data={"i": str(i)}
        )
        api.create_namespaced_config_map(CM_NAMESPACE, body)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(create, range(count)))


@dataclass
class Cold:
    """One contender's cold start: time to every key seen once, and its processes' memory."""

    seconds: float
    peak_rss_mib: float
    peak_rss_mib_per_process: list[float]
    rss_mib: float
    cpu_s: float
    processes: int


def cold_start(
    name: str,
    spawn: Callable[[Callable[[str], None]], list[int]],
    stop: Callable[[], None],
    count: int,
    timeout_s: float,
) -> Cold:
    """Starts a contender (``spawn`` returns its pids) and waits until it has seen ``count``
    distinct keys."""
    seen: set[str] = set()
    lock = threading.Lock()
    all_seen = threading.Event()

    def on_seen(key: str) -> None:
        with lock:
            seen.add(key)
            if len(seen) >= count:
                all_seen.set()

    start = time.monotonic()
    pids = spawn(on_seen)
    try:
        if not all_seen.wait(timeout_s):
            sys.exit(f"bench-sdk: {name} saw {len(seen)} of {count} keys in {timeout_s} s")
        seconds = time.monotonic() - start
        peaks = [round(proc.status_kib(p, "VmHWM") / 1024, 1) for p in pids]
        result = Cold(
            seconds=seconds,
            peak_rss_mib=sum(peaks),
            peak_rss_mib_per_process=peaks,
            rss_mib=sum(proc.status_kib(p, "VmRSS") for p in pids) / 1024,
            cpu_s=sum(proc.cpu_seconds(p) for p in pids),
            processes=len(pids),
        )
    finally:
        stop()
    print(
        f"  {name}: {result.seconds:.2f} s, peak RSS {result.peak_rss_mib:.0f} MiB "
        f"({result.processes} processes), CPU {result.cpu_s:.1f} s",
        flush=True,
    )
    return result


def kube(args: argparse.Namespace, table: Table, logdir: Path) -> None:
    kube_api = KubeApiServer.start(Path(tempfile.mkdtemp(prefix="bench-sdk-kube-", dir=logdir)))
    try:
        print(f"creating {args.configmaps} ConfigMaps ...", flush=True)
        create_configmaps(kube_api.kubeconfig, args.configmaps)
        results: dict[str, Cold] = {}
        for replicas in (1, 4):
            results[f"informerd-{replicas}"] = run_informerd(args, kube_api, replicas, logdir)
            results[f"official-{replicas}"] = run_workers(
                f"official-{replicas}",
                [
                    python(
                        "official_worker.py",
                        f"--kubeconfig={kube_api.kubeconfig}",
                        f"--namespace={CM_NAMESPACE}",
                    )
                ]
                * replicas,
                args,
                logdir,
            )
        kopf = [sys.executable, "-m", "kopf", "run", f"--namespace={CM_NAMESPACE}"]
        kopf_env = {"KUBECONFIG": str(kube_api.kubeconfig)}
        script = str(HERE / "kopf_worker.py")
        results["kopf-1"] = run_workers(
            "kopf-1", [[*kopf, "--standalone", script]], args, logdir, env=kopf_env
        )
        # kopf's peering: distinct priorities, so that one replica is active and three pause.
        install_kopf_peering(kube_api.kubeconfig, "bench")
        results["kopf-4"] = run_workers(
            "kopf-4",
            [[*kopf, "--peering=bench", f"--priority={100 - i}", script] for i in range(4)],
            args,
            logdir,
            env=kopf_env,
        )
    finally:
        kube_api.close()
    table.raw["kube"] = {k: vars(v) for k, v in results.items()}
    n = f"{args.configmaps // 1000}k" if args.configmaps >= 1000 else str(args.configmaps)
    rows = [
        # (replicas, contender, its name in the table, target for time, target for RSS)
        (1, "kopf-1", "kopf (standalone)", 10.0, 0.0),
        (1, "official-1", "official client watch", 0.0, 0.0),
        (4, "kopf-4", "kopf x4 (peering: 1 active)", 10.0, 0.0),
        (4, "official-4", "official client watch x4", 0.0, 2.0),
    ]
    for replicas, key, ref_name, time_target, _ in rows:
        ours, ref = results[f"informerd-{replicas}"], results[key]
        table.row(
            f"{n} ConfigMaps, {replicas} replica{'s' if replicas > 1 else ''}: "
            "start → all reconciled",
            "s",
            ours.seconds,
            ref.seconds,
            ref_name,
            time_target,
            False,
        )
    for replicas, key, ref_name, _, rss_target in rows:
        ours, ref = results[f"informerd-{replicas}"], results[key]
        table.row(
            f"{n} ConfigMaps, {replicas} replica{'s' if replicas > 1 else ''}: total peak RSS "
            f"(daemon + {replicas} worker{'s' if replicas > 1 else ''})",
            "MiB",
            ours.peak_rss_mib,
            ref.peak_rss_mib,
            ref_name,
            rss_target,
            False,
        )


def install_kopf_peering(kubeconfig: Path, name: str) -> None:
    """kopf's namespaced peering CRD (kopf does not install it) and one KopfPeering object."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(kubeconfig))
    crd: Any = {  # the client takes a dict as well as its models
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "kopfpeerings.kopf.dev"},
        "spec": {
            "scope": "Namespaced",
            "group": "kopf.dev",
            "names": {"kind": "KopfPeering", "plural": "kopfpeerings", "singular": "kopfpeering"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "status": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    extensions = client.ApiextensionsV1Api(api)
    extensions.create_custom_resource_definition(crd)

    def established() -> bool:
        status = extensions.read_custom_resource_definition("kopfpeerings.kopf.dev").status
        conditions = (status.conditions if status is not None else None) or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    deadline = time.monotonic() + 60
    while not established():
        if time.monotonic() > deadline:
            sys.exit("bench-sdk: kopf's peering CRD not established within 60 s")
        time.sleep(0.1)
    peering = {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": name}}
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "kopf.dev", "v1", CM_NAMESPACE, "kopfpeerings", peering
    )


def run_workers(
    name: str,
    argvs: list[list[str]],
    args: argparse.Namespace,
    logdir: Path,
    env: dict[str, str] | None = None,
) -> Cold:
    workers: list[Worker] = []

    def spawn(on_seen: Callable[[str], None]) -> list[int]:
        workers.extend(
            Worker(f"{name}.{i}", argv, logdir, on_seen, env) for i, argv in enumerate(argvs)
        )
        return [w.pid for w in workers]

    def stop() -> None:
        for w in workers:
            w.stop()

    return cold_start(name, spawn, stop, args.configmaps, args.timeout)


def run_informerd(
    args: argparse.Namespace, kube_api: KubeApiServer, replicas: int, logdir: Path
) -> Cold:
    """informerd's cold start: the daemon and ``replicas`` SDK workers started together."""
    name = f"informerd-{replicas}"
    workers: list[Worker] = []
    daemons: list[Daemon] = []

    def spawn(on_seen: Callable[[str], None]) -> list[int]:
        daemon = Daemon.start(
            kubeconfig=kube_api.kubeconfig, workdir=Path(tempfile.mkdtemp(prefix=name, dir=logdir))
        )
        daemons.append(daemon)
        argv = python(
            "sdk_worker.py",
            f"--target={daemon.target}",
            "--queue=cms",
            f"--namespace={CM_NAMESPACE}",
            f"--concurrency={args.kube_concurrency}",
            "--seen",
        )
        workers.extend(Worker(f"{name}.{i}", argv, logdir, on_seen) for i in range(replicas))
        assert daemon.proc is not None
        return [daemon.proc.pid, *(w.pid for w in workers)]

    def stop() -> None:
        for w in workers:
            w.stop()
        for d in daemons:
            d.close()

    return cold_start(name, spawn, stop, args.configmaps, args.timeout)


# --- main ---------------------------------------------------------------------------------


async def fake_cluster_rows(args: argparse.Namespace, table: Table, logdir: Path) -> None:
    api = FakeApiServer.start(Path(tempfile.mkdtemp(prefix="fake-", dir=logdir)))
    with (
        api,
        Daemon.start(
            kubeconfig=api.kubeconfig,
            workdir=Path(tempfile.mkdtemp(prefix="informerd-", dir=logdir)),
        ) as daemon,
    ):
        if "throughput" in args.only:
            print("Work stream drain: floors and the SDK ...", flush=True)
            await throughput(args, table, daemon, logdir)
        if "latency" in args.only:
            print("change → reconcile entry ...", flush=True)
            await latency(args, table, api, daemon, logdir)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--keys", type=int, default=1_000_000, help="keys drained per run at batch >= 16"
    )
    p.add_argument(
        "--keys-batch1", type=int, default=200_000, help="keys drained per run at batch 1"
    )
    p.add_argument(
        "--configmaps", type=int, default=10_000, help="ConfigMaps on the kube-apiserver"
    )
    p.add_argument(
        "--kube-concurrency", type=int, default=64, help="SDK concurrency in the kube rows"
    )
    p.add_argument(
        "--change-rate", type=float, default=1000.0, help="changes/s in the latency rows"
    )
    p.add_argument("--change-seconds", type=float, default=10.0, help="how long changes are made")
    p.add_argument("--change-objects", type=int, default=100, help="ConfigMaps the changes go to")
    p.add_argument(
        "--timeout", type=float, default=900.0, help="the most any one step may take (s)"
    )
    p.add_argument(
        "--only", default="throughput,latency,kube", help="which parts to run (comma-separated)"
    )
    p.add_argument(
        "--repetitions", type=int, default=3, help="runs of each drain (the median is reported)"
    )
    p.add_argument("--out", type=Path, default=ROOT / "bench/results/sdk.json")
    args = p.parse_args(argv)
    args.only = set(args.only.split(","))
    table = Table()
    table.raw["arguments"] = {
        k: sorted(v) if isinstance(v, set) else str(v) if isinstance(v, Path) else v
        for k, v in vars(args).items()
    }
    with tempfile.TemporaryDirectory(prefix="bench-sdk-") as tmp:
        logdir = Path(tmp)
        if args.only & {"throughput", "latency"}:
            asyncio.run(fake_cluster_rows(args, table, logdir))
        if "kube" in args.only:
            print(f"{args.configmaps} ConfigMaps on the real kube-apiserver ...", flush=True)
            kube(args, table, logdir)
    table.write(args.out)
    table.print()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
