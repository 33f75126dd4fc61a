"""`make bench-sdk`: informerd's SDKs beside what they are built on and what they replace, in one
run: the Python SDK beside bare grpcio floors, kopf and the official ``kubernetes`` client; the
Rust SDK beside a bare tonic floor, the C++ load generator (bench/load) and kube-rs' Controller.
Prints the table and writes the shared row format ({"rows": [...], "raw": {...}}) to --out.
What each row measures: bench/sdk/README.md.

Every contender runs as its own process (bench/sdk/*_worker.py, the binaries of
sdk/rust/bench), so that RSS (VmHWM from /proc/PID/status) and CPU (/proc/PID/stat) are per
process. Sizes and durations are arguments: the defaults are the issue's; develop with e.g.
``--keys 20000 --configmaps 500``.
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
import urllib.request
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
RUST_FLOORS = ("current", "multi")  # tokio's current-thread and multi-thread runtimes
SDKS = ("python", "rust")
CM_NAMESPACE = "bench-cms"
# The Rust drains' keys name ConfigMaps that exist (seeded in the fake API server, ~300 bytes
# each), so that every lease carries its object: the Rust SDK, like kube-runtime, does not call
# the reconcile for a key whose object is gone.
# The Rust drains' ConfigMaps: named as bench/load names its keys (load/key-%08d), so that the C++
# load generator drains keys of the same objects as the other contenders.
OBJECTS_NAMESPACE = "load"


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

    def itself(self, name: str, unit: str, value: float, higher_is_better: bool) -> None:
        """An untargeted row reporting a figure beside itself (a floor, a reference)."""
        self.row(name, unit, value, value, "itself", 0.0, higher_is_better)

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


async def prefill(
    client: informerd.Client,
    informer_id: str,
    queue: str,
    keys: int,
    names: Sequence[str] | None = None,
) -> None:
    """A fresh queue bound to the informer the controller watches, holding ``keys`` keys
    (``names``, else keys of no object): the spec the SDK's controller would create, so that its
    UpdateQueue changes nothing."""
    spec = queue_spec(queue, [object_source(informer_id)])
    if await _exists(client, queue):
        await client.queues.delete(queue)
    await client.queues.create(spec)
    step = 10_000  # the most keys one Add takes
    for start in range(0, keys, step):
        end = min(keys, start + step)
        batch = list(names[start:end]) if names else [f"empty/k{i}" for i in range(start, end)]
        await client.queues.add(queue, batch, timeout_s=60)


def seed_objects(api: FakeApiServer, count: int) -> list[str]:
    """``count`` ConfigMaps of about 300 bytes in OBJECTS_NAMESPACE, named key-00000000 ...
    (the fake names seeded objects PREFIX%07d: prefix "key-0" gives bench/load's key names);
    their keys."""
    if count >= 10_000_000:
        sys.exit(f"bench-sdk: {count} objects: at most 9,999,999 (bench/load's key names)")
    req = urllib.request.Request(
        api.url + "/_fake/seed",
        data=json.dumps(
            {
                "resource": "configmaps",
                "namespace": OBJECTS_NAMESPACE,
                "count": count,
                "bytes": 300,
                "prefix": "key-0",
            }
        ).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    # One request (names restart at 0 in each), so a long deadline: ~15 s per million here.
    with urllib.request.urlopen(req, timeout=600) as resp:
        resp.read()
    return [f"{OBJECTS_NAMESPACE}/key-{i:08d}" for i in range(count)]


async def _exists(client: informerd.Client, queue: str) -> bool:
    try:
        await client.queues.get(queue)
    except informerd.NotFound:
        return False
    return True


def rust(args: argparse.Namespace, binary: str, *argv: str) -> list[str]:
    """A Rust worker of sdk/rust/bench (``--rust-bin``: cargo's release directory)."""
    return [str(args.rust_bin / binary), *argv]


def run_load(
    args: argparse.Namespace,
    target: str,
    queue: str,
    batch: int,
    in_flight: int,
    keys: int,
    objects_id: str,
) -> dict[str, Any]:
    """The C++ load generator (bench/load) draining ``keys`` keys it pre-fills on one Work
    stream, each lease with its object from ``objects_id`` (``--objects``, as the other
    contenders); its JSON summary with ``keys``, ``seconds`` and ``keys_per_second`` as the
    workers report them."""
    argv = [
        str(args.load),
        f"--target={target}",
        f"--queue={queue}",
        f"--informer={objects_id}",
        "--objects",
        "--adders=0",
        "--prefill",
        f"--keys={keys}",
        "--workers=1",
        f"--batch={batch}",
        f"--in_flight={in_flight}",
        f"--duration={int(args.timeout)}s",
        "--delete_queue",
        "--json",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=args.timeout + 120)
    if done.returncode != 0 or not done.stdout.strip():
        sys.exit(f"bench-sdk: {' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")
    r: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if r["completed"] < keys or r["refusals"] or r["errors"]:
        sys.exit(f"bench-sdk: the load generator drained {r['completed']} of {keys} keys: {r}")
    r["keys"] = r["completed"]
    return r


def drain_contenders(
    args: argparse.Namespace, informer_id: str, objects_id: str, batch: int, in_flight: int
) -> list[tuple[str, list[str]]]:
    """(name, argv) of every worker draining a pre-filled queue at one shape; "load" (the C++
    load generator, which fills its own queue) has no argv. The Python workers drain keys of
    no object (``informer_id``: an empty namespace's), the Rust ones keys of existing objects
    (``objects_id``)."""
    contenders: list[tuple[str, list[str]]] = []
    if "python" in args.sdk:
        contenders += [
            (
                f"floor-{api}",
                python(
                    "floor_worker.py",
                    f"--api={api}",
                    f"--batch={batch}",
                    f"--in-flight={in_flight}",
                    f"--object-informer={informer_id}",
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
    if "rust" in args.sdk:
        contenders += [
            (
                f"rust-floor-{runtime}",
                rust(
                    args,
                    "tonic-floor",
                    f"--runtime={runtime}",
                    f"--batch={batch}",
                    f"--in-flight={in_flight}",
                    f"--object-informer={objects_id}",
                ),
            )
            for runtime in RUST_FLOORS
        ]
        # The no-op controller does not look at the object (decode=none: scanned, not built),
        # like the floors; "typed" decodes each into k8s-openapi's ConfigMap, as a kube-rs user's
        # controller would.
        contenders += [
            (
                f"rust-sdk-{decode}",
                rust(
                    args,
                    "sdk-worker",
                    f"--decode={decode}",
                    f"--namespace={OBJECTS_NAMESPACE}",
                    f"--concurrency={in_flight}",
                    f"--max-batch={batch}",
                ),
            )
            for decode in ("none", "typed")
        ]
        if args.load is not None:
            contenders.append(("load", []))
    return contenders


async def throughput(
    args: argparse.Namespace, table: Table, api: FakeApiServer, daemon: Daemon, logdir: Path
) -> None:
    client = informerd.Client.connect(daemon.target)
    try:
        informer = await client.informers.ensure("v1", "ConfigMap", namespace="bench-empty")
        await informer.wait_for_sync(timeout_s=60)
        objects, object_keys = informer, []
        if "rust" in args.sdk:
            count = max(args.keys, args.keys_batch1)
            print(f"  seeding {count} ConfigMaps for the Rust drains ...", flush=True)
            object_keys = await asyncio.to_thread(seed_objects, api, count)
            objects = await client.informers.ensure("v1", "ConfigMap", namespace=OBJECTS_NAMESPACE)
            await objects.wait_for_sync(timeout_s=args.timeout)
        for batch, in_flight in SHAPES:
            keys = args.keys_batch1 if batch == 1 else args.keys
            contenders = drain_contenders(args, informer.id, objects.id, batch, in_flight)
            # Contenders alternate within each repetition, so that drift in the machine's load
            # hits them alike; each row is the median of its repetitions.
            runs: dict[str, list[float]] = {name: [] for name, _ in contenders}
            for rep in range(args.repetitions):
                for name, argv in contenders:
                    queue = f"tput-{name}-{batch}"
                    if name == "load":
                        if await _exists(client, queue):
                            await client.queues.delete(queue)
                        r = await asyncio.to_thread(
                            run_load,
                            args,
                            daemon.target,
                            queue,
                            batch,
                            in_flight,
                            keys,
                            objects.id,
                        )
                    elif name.startswith("rust-"):
                        await prefill(client, objects.id, queue, keys, object_keys)
                    else:
                        await prefill(client, informer.id, queue, keys)
                    if name != "load":
                        w = Worker(
                            f"{queue}.{rep}",
                            [
                                *argv,
                                f"--target={daemon.target}",
                                f"--queue={queue}",
                                f"--keys={keys}",
                            ],
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
            shape = f"batch {batch}, {in_flight} in flight"
            if "python" in args.sdk:
                python_drain_rows(table, rates, batch, shape)
            if "rust" in args.sdk:
                rust_drain_rows(table, rates, shape)
    finally:
        await client.close()


def python_drain_rows(table: Table, rates: dict[str, float], batch: int, shape: str) -> None:
    best = max(rates[f"floor-{api}"] for api in FLOORS)
    best_name = max(FLOORS, key=lambda api: rates[f"floor-{api}"])
    table.row(
        f"Python SDK no-op controller drain, {shape}",
        "keys/s",
        rates["sdk"],
        best,
        f"best bare grpcio floor ({best_name})",
        0.25 if batch == 1 else 0.5,
        True,
    )
    if batch == 128:
        table.row(
            f"Python SDK no-op controller drain, {shape} (absolute)",
            "keys/s",
            rates["sdk"],
            100_000,
            "target 100k keys/s",
            1.0,
            True,
        )
    for api in FLOORS:
        table.itself(
            f"floor: bare grpcio ({api}) drain, {shape}", "keys/s", rates[f"floor-{api}"], True
        )


def rust_drain_rows(table: Table, rates: dict[str, float], shape: str) -> None:
    best = max(rates[f"rust-floor-{rt}"] for rt in RUST_FLOORS)
    best_name = max(RUST_FLOORS, key=lambda rt: rates[f"rust-floor-{rt}"])
    name = f"Rust SDK no-op controller drain, {shape}"
    table.row(
        name,
        "keys/s",
        rates["rust-sdk-none"],
        best,
        f"best bare tonic floor ({best_name}-thread runtime)",
        0.8,
        True,
    )
    if "load" in rates:
        table.row(
            name,
            "keys/s",
            rates["rust-sdk-none"],
            rates["load"],
            "C++ load generator (bench/load --objects)",
            0.9,
            True,
        )
    table.row(
        f"Rust SDK no-op controller drain, {shape}, objects decoded as k8s-openapi ConfigMaps",
        "keys/s",
        rates["rust-sdk-typed"],
        best,
        f"best bare tonic floor ({best_name}-thread runtime)",
        0.0,
        True,
    )
    for rt in RUST_FLOORS:
        table.itself(
            f"floor: bare tonic ({rt}-thread runtime) drain, {shape}",
            "keys/s",
            rates[f"rust-floor-{rt}"],
            True,
        )
    if "load" in rates:
        table.itself(
            f"C++ load generator (bench/load --objects) drain, {shape}",
            "keys/s",
            rates["load"],
            True,
        )


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
            table.itself(
                f"change → reconcile entry p50 at {args.change_rate:.0f}/s ({name})",
                "ms",
                lat["p50_us"] / 1e3,
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
    watches: int


class ApiWatches:
    """The kube-apiserver's open watches on ConfigMaps: the sum of its stable gauge
    ``apiserver_longrunning_requests{verb="WATCH", resource="configmaps"}`` (every active WATCH
    request, as the API server counts them) from /metrics, less what was open before any
    contender started (the API server's own loopback informers)."""

    def __init__(self, kubeconfig: Path) -> None:
        from kubernetes import config

        self._api = config.new_client_from_config(config_file=str(kubeconfig))
        self.baseline = self._open()

    def _open(self) -> int:
        method, url, headers, _, _ = self._api.param_serialize(
            "GET", "/metrics", auth_settings=["BearerToken"]
        )
        text = self._api.call_api(method, url, headers, _request_timeout=30).read().decode()
        total = 0.0
        for line in text.splitlines():
            if (
                line.startswith("apiserver_longrunning_requests{")
                and 'verb="WATCH"' in line
                and 'resource="configmaps"' in line
            ):
                total += float(line.rsplit(" ", 1)[1])
        return int(total)

    def now(self) -> int:
        """Open watches on ConfigMaps beyond the baseline."""
        return self._open() - self.baseline

    def settle(self, timeout_s: float) -> None:
        """Waits until the previous contender's watches have closed."""
        deadline = time.monotonic() + timeout_s
        while (n := self.now()) > 0:
            if time.monotonic() > deadline:
                sys.exit(f"bench-sdk: {n} watches on ConfigMaps still open after {timeout_s} s")
            time.sleep(0.2)

    def steady(self, timeout_s: float) -> int:
        """The contender's watches once they stop changing (the same non-zero count over 1 s):
        a watch opens after its list, which may end after the last key was reconciled."""
        deadline = time.monotonic() + timeout_s
        samples: list[int] = []
        while time.monotonic() < deadline:
            samples.append(self.now())
            if len(samples) >= 5 and samples[-1] > 0 and len(set(samples[-5:])) == 1:
                break
            time.sleep(0.25)
        return samples[-1]


def cold_start(
    name: str,
    spawn: Callable[[Callable[[str], None]], list[int]],
    stop: Callable[[], None],
    count: int,
    timeout_s: float,
    watches: ApiWatches,
) -> Cold:
    """Starts a contender (``spawn`` returns its pids) and waits until it has seen ``count``
    distinct keys; then counts its watches on the API server."""
    watches.settle(timeout_s)
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
            watches=0,
        )
        result.watches = watches.steady(min(timeout_s, 30.0))
    finally:
        stop()
    print(
        f"  {name}: {result.seconds:.2f} s, peak RSS {result.peak_rss_mib:.0f} MiB "
        f"({result.processes} processes), CPU {result.cpu_s:.1f} s, "
        f"{result.watches} watches",
        flush=True,
    )
    return result


def kube(args: argparse.Namespace, table: Table, logdir: Path) -> None:
    kube_api = KubeApiServer.start(Path(tempfile.mkdtemp(prefix="bench-sdk-kube-", dir=logdir)))
    try:
        print(f"creating {args.configmaps} ConfigMaps ...", flush=True)
        create_configmaps(kube_api.kubeconfig, args.configmaps)
        watches = ApiWatches(kube_api.kubeconfig)
        results: dict[str, Cold] = {}

        def workers(name: str, argvs: list[list[str]], env: dict[str, str] | None = None) -> None:
            results[name] = run_workers(name, argvs, args, logdir, watches, env)

        for replicas in (1, 4):
            if "python" in args.sdk:
                results[f"informerd-{replicas}"] = run_informerd(
                    args, kube_api, replicas, logdir, watches, "python"
                )
                official = python(
                    "official_worker.py",
                    f"--kubeconfig={kube_api.kubeconfig}",
                    f"--namespace={CM_NAMESPACE}",
                )
                workers(f"official-{replicas}", [official] * replicas)
            if "rust" in args.sdk:
                results[f"informerd-rust-{replicas}"] = run_informerd(
                    args, kube_api, replicas, logdir, watches, "rust"
                )
                kube_rs = rust(
                    args,
                    "kube-rs-worker",
                    f"--kubeconfig={kube_api.kubeconfig}",
                    f"--namespace={CM_NAMESPACE}",
                )
                workers(f"kube-rs-{replicas}", [kube_rs] * replicas)
        if "python" in args.sdk:
            kopf = [sys.executable, "-m", "kopf", "run", f"--namespace={CM_NAMESPACE}"]
            kopf_env = {"KUBECONFIG": str(kube_api.kubeconfig)}
            script = str(HERE / "kopf_worker.py")
            workers("kopf-1", [[*kopf, "--standalone", script]], kopf_env)
            # kopf's peering: distinct priorities, so that one replica is active and three pause.
            install_kopf_peering(kube_api.kubeconfig, "bench")
            workers(
                "kopf-4",
                [[*kopf, "--peering=bench", f"--priority={100 - i}", script] for i in range(4)],
                kopf_env,
            )
    finally:
        kube_api.close()
    table.raw["kube"] = {k: vars(v) for k, v in results.items()}
    n = f"{args.configmaps // 1000}k" if args.configmaps >= 1000 else str(args.configmaps)
    if "python" in args.sdk:
        python_kube_rows(table, results, n)
    if "rust" in args.sdk:
        rust_kube_rows(table, results, n)


def replicas_text(replicas: int, what: str = "replica") -> str:
    return f"{replicas} {what}{'s' if replicas > 1 else ''}"


def python_kube_rows(table: Table, results: dict[str, Cold], n: str) -> None:
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
            f"{n} ConfigMaps, {replicas_text(replicas)}: start → all reconciled (Python SDK)",
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
            f"{n} ConfigMaps, {replicas_text(replicas)}: total peak RSS "
            f"(daemon + {replicas_text(replicas, 'Python worker')})",
            "MiB",
            ours.peak_rss_mib,
            ref.peak_rss_mib,
            ref_name,
            rss_target,
            False,
        )


def rust_kube_rows(table: Table, results: dict[str, Cold], n: str) -> None:
    for replicas in (1, 4):
        ours, ref = results[f"informerd-rust-{replicas}"], results[f"kube-rs-{replicas}"]
        ref_name = "kube-rs Controller" + (f" x{replicas}" if replicas > 1 else "")
        table.row(
            f"{n} ConfigMaps, {replicas_text(replicas)}: start → all reconciled (Rust SDK)",
            "s",
            ours.seconds,
            ref.seconds,
            ref_name,
            0.0,
            False,
        )
        table.row(
            f"{n} ConfigMaps, {replicas_text(replicas)}: total peak RSS "
            f"(daemon + {replicas_text(replicas, 'Rust worker')})",
            "MiB",
            ours.peak_rss_mib,
            ref.peak_rss_mib,
            ref_name,
            2.0 if replicas == 4 else 0.0,
            False,
        )
        # The target is the claim itself: informerd's one watch against one per replica.
        table.row(
            f"{n} ConfigMaps, {replicas_text(replicas)}: API-server watches (Rust SDK)",
            "watches",
            ours.watches,
            ref.watches,
            ref_name,
            float(replicas),
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
    watches: ApiWatches,
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

    return cold_start(name, spawn, stop, args.configmaps, args.timeout, watches)


def run_informerd(
    args: argparse.Namespace,
    kube_api: KubeApiServer,
    replicas: int,
    logdir: Path,
    watches: ApiWatches,
    sdk: str,
) -> Cold:
    """informerd's cold start: the daemon and ``replicas`` SDK workers (``sdk``: python or
    rust) started together."""
    name = f"informerd-{replicas}" if sdk == "python" else f"informerd-{sdk}-{replicas}"
    workers: list[Worker] = []
    daemons: list[Daemon] = []

    def spawn(on_seen: Callable[[str], None]) -> list[int]:
        daemon = Daemon.start(
            kubeconfig=kube_api.kubeconfig, workdir=Path(tempfile.mkdtemp(prefix=name, dir=logdir))
        )
        daemons.append(daemon)
        worker_args = (
            f"--target={daemon.target}",
            "--queue=cms",
            f"--namespace={CM_NAMESPACE}",
            f"--concurrency={args.kube_concurrency}",
            "--seen",
        )
        if sdk == "python":
            argv = python("sdk_worker.py", *worker_args)
        else:
            argv = rust(args, "sdk-worker", *worker_args)
        workers.extend(Worker(f"{name}.{i}", argv, logdir, on_seen) for i in range(replicas))
        assert daemon.proc is not None
        return [daemon.proc.pid, *(w.pid for w in workers)]

    def stop() -> None:
        for w in workers:
            w.stop()
        for d in daemons:
            d.close()

    return cold_start(name, spawn, stop, args.configmaps, args.timeout, watches)


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
            await throughput(args, table, api, daemon, logdir)
        if "latency" in args.only and "python" in args.sdk:
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
    p.add_argument("--sdk", default=",".join(SDKS), help="which SDKs' rows to run (python,rust)")
    p.add_argument(
        "--rust-bin",
        type=Path,
        help="the Rust workers' directory (cargo build --release -p informerd-bench)",
    )
    p.add_argument("--load", type=Path, help="the C++ load generator (bazel //bench:load)")
    p.add_argument("--out", type=Path, default=ROOT / "bench/results/sdk.json")
    args = p.parse_args(argv)
    args.only = set(args.only.split(","))
    args.sdk = set(args.sdk.split(","))
    if args.sdk - set(SDKS):
        p.error(f"--sdk: unknown {sorted(args.sdk - set(SDKS))}; expected some of {SDKS}")
    if "rust" in args.sdk:
        missing = [
            b
            for b in ("tonic-floor", "sdk-worker", "kube-rs-worker")
            if args.rust_bin is None or not (args.rust_bin / b).is_file()
        ]
        if missing:
            p.error(f"--rust-bin={args.rust_bin}: no {', '.join(missing)} (or --sdk=python)")
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
