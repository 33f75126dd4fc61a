"""The controller runtime against real daemons: outcomes, signals, crashes, restarts."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import informerd
from informerd import Context, Controller, KubeObject, Result, TerminalError
from informerd.informers import label_index
from informerd.queues import LOW_PRIORITY, exponential, generation_changed, source_priorities
from informerd.testing import Daemon, FakeApiServer, eventually, queue_idle

WORKER = Path(__file__).parent / "workers" / "oracle_worker.py"


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


async def stop_controller(ctl: Controller, task: asyncio.Task[None]) -> None:
    ctl.stop()
    await asyncio.wait_for(task, 30)


# --- the multi-process oracle ---------------------------------------------------------------


@dataclass
class Interval:
    pid: int
    key: str
    token: int
    start: float
    end: float | None


class Oracle:
    """Worker processes that record every reconcile's start and end to files in ``dir``."""

    def __init__(self, dir: Path, target: str, namespace: str, queue: str) -> None:
        self.dir = dir
        self.args = ["--target", target, "--namespace", namespace, "--queue", queue]
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(
        self,
        sleep_s: float,
        concurrency: int = 2,
        hang_file: Path | None = None,
        program: Sequence[str] = (sys.executable, str(WORKER)),
    ) -> subprocess.Popen[bytes]:
        """Starts a worker: ``program`` is the Python oracle worker unless given (any worker
        with its flags and record, e.g. the Rust SDK's ``oracle_worker`` example)."""
        n = len(self.procs)
        hang = ("--hang-file", str(hang_file)) if hang_file is not None else ()
        with (self.dir / f"worker{n}.log").open("wb") as log:
            proc = subprocess.Popen(
                [
                    *program,
                    *self.args,
                    *("--out", str(self.dir / f"w{n}.rec"), "--sleep", str(sleep_s)),
                    *("--concurrency", str(concurrency)),
                    *hang,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        return proc

    def intervals(self) -> list[Interval]:
        open_: dict[tuple[int, str, int], Interval] = {}
        done: list[Interval] = []
        for path in sorted(self.dir.glob("w*.rec")):
            for line in path.read_text().splitlines():
                parts = line.split()
                if len(parts) != 5:
                    continue  # a line cut by SIGKILL
                kind, pid, key, token, t = parts
                ident = (int(pid), key, int(token))
                if kind == "S":
                    open_[ident] = Interval(int(pid), key, int(token), float(t), None)
                elif ident in open_:
                    iv = open_.pop(ident)
                    iv.end = float(t)
                    done.append(iv)
        return done + list(open_.values())

    def finished_keys(self) -> set[str]:
        return {iv.key for iv in self.intervals() if iv.end is not None}

    def open_of(self, pid: int) -> list[Interval]:
        return [iv for iv in self.intervals() if iv.pid == pid and iv.end is None]

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)


@pytest.fixture
def oracle_factory(tmp_path: Path) -> Iterator[Callable[[str, str, str], Oracle]]:
    made: list[Oracle] = []

    def make(target: str, namespace: str, queue: str) -> Oracle:
        d = tmp_path / f"oracle{len(made)}"
        d.mkdir()
        made.append(Oracle(d, target, namespace, queue))
        return made[-1]

    yield make
    for o in made:
        o.close()


def assert_no_overlap(intervals: list[Interval], ends: dict[int, float]) -> None:
    """No key in two reconciles at once; an unfinished reconcile of a killed worker ends when
    the worker was killed (``ends[pid]``)."""
    by_key: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for iv in intervals:
        end = iv.end if iv.end is not None else ends.get(iv.pid)
        assert end is not None, f"pid {iv.pid} left {iv.key} unfinished and was not killed"
        by_key[iv.key].append((iv.start, end, iv.token))
    for key, spans in by_key.items():
        spans.sort()
        for (_, end, token), (start, _, next_token) in itertools.pairwise(spans):
            assert start >= end, f"{key}: token {next_token} started before token {token} ended"
            assert next_token > token


async def workers_attached(client: informerd.Client, queue: str, n: int) -> None:
    async def attached() -> bool:
        try:
            return (await client.queues.get(queue)).state.workers == n
        except informerd.NotFound:
            return False  # no worker created it yet

    await eventually(attached, f"{n} workers on {queue}", 90)


def seed_keys(api: FakeApiServer, namespace: str, count: int) -> set[str]:
    api.seed("configmaps", namespace, count)
    return {f"{namespace}/seed-{i:07d}" for i in range(count)}


async def test_a_killed_worker_loses_nothing_and_its_keys_come_back_quickly(
    informerd_daemon: Daemon,
    informerd_client: informerd.Client,
    fake_apiserver: FakeApiServer,
    oracle_factory: Callable[[str, str, str], Oracle],
) -> None:
    oracle = oracle_factory(informerd_daemon.target, "ctl-kill", "ctl-kill")
    hang_file = oracle.dir / "victim.hang"
    procs = [oracle.spawn(sleep_s=0.15, hang_file=hang_file if i == 1 else None) for i in range(3)]
    victim = procs[1]
    # Objects come once every worker is attached, so that each gets its share.
    await workers_attached(informerd_client, "ctl-kill", 3)
    keys = seed_keys(fake_apiserver, "ctl-kill", 200)

    # The victim dies mid-reconcile near the end of the backlog: its keys go back to the end of
    # the queue, so what the redelivery time measures is the daemon noticing the lost stream,
    # not the other workers' backlog.
    await eventually(lambda: len(oracle.finished_keys()) >= 150, "150 objects reconciled", 120)
    # From now on the victim's reconciles hang: wait until one that started after this holds.
    hang_file.touch()
    hung_from = time.monotonic()

    def victim_hung() -> bool:
        return any(iv.start > hung_from for iv in oracle.open_of(victim.pid))

    await eventually(victim_hung, "the victim mid-reconcile near the end", 120)
    killed_at = time.monotonic()
    victim.send_signal(signal.SIGKILL)
    victim.wait(30)
    held = oracle.open_of(victim.pid)
    assert held, "the victim was mid-reconcile"
    await eventually(lambda: oracle.finished_keys() >= keys, "every object reconciled", 120)
    intervals = oracle.intervals()
    assert_no_overlap(intervals, {victim.pid: killed_at})
    for iv in held:
        again = [
            o.start
            for o in intervals
            if o.key == iv.key and o.pid != victim.pid and o.start > killed_at
        ]
        assert again, f"{iv.key} was not redelivered"
        # SIGKILL closes the worker's connection: the daemon sees the stream end at once.
        assert min(again) - killed_at < 10, f"{iv.key} redelivered after {min(again) - killed_at} s"
        print(f"{iv.key} redelivered {min(again) - killed_at:.3f} s after the kill")
    for proc in procs:
        if proc is not victim:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0


async def test_sigterm_drains_a_worker_and_loses_nothing(
    informerd_daemon: Daemon,
    informerd_client: informerd.Client,
    fake_apiserver: FakeApiServer,
    oracle_factory: Callable[[str, str, str], Oracle],
) -> None:
    oracle = oracle_factory(informerd_daemon.target, "ctl-term", "ctl-term")
    leaving = oracle.spawn(sleep_s=0.3, concurrency=3)
    staying = oracle.spawn(sleep_s=0.05)
    await workers_attached(informerd_client, "ctl-term", 2)
    keys = seed_keys(fake_apiserver, "ctl-term", 80)
    await eventually(lambda: bool(oracle.open_of(leaving.pid)), "the worker mid-reconcile", 60)
    leaving.send_signal(signal.SIGTERM)
    assert leaving.wait(60) == 0
    # Every reconcile it started finished (none was cut off), and nothing was lost.
    assert not oracle.open_of(leaving.pid)
    await eventually(lambda: oracle.finished_keys() >= keys, "every object reconciled", 120)
    assert_no_overlap(oracle.intervals(), {})
    staying.send_signal(signal.SIGTERM)
    assert staying.wait(60) == 0


# --- in-process controllers -------------------------------------------------------------------


async def test_a_daemon_restart_reconnects_reensures_and_reconciles_again(
    informerd_daemon: Daemon,
    informerd_client: informerd.Client,
    fake_apiserver: FakeApiServer,
    registry: CollectorRegistry,
) -> None:
    keys = seed_keys(fake_apiserver, "ctl-restart", 20)
    counts: Counter[str] = Counter()

    async def reconcile(obj: KubeObject | None, ctx: Context) -> None:
        assert obj is not None
        assert obj.key == ctx.key
        counts[ctx.key] += 1

    ctl = Controller("ctl-restart", informerd_client, concurrency=4, registry=registry)
    ctl.for_("v1", "ConfigMap", namespace="ctl-restart")
    task = asyncio.create_task(ctl.run(reconcile))
    await eventually(lambda: set(counts) == keys, "every object reconciled")

    await eventually(lambda: queue_idle(informerd_client, "ctl-restart"), "the queue idle")
    before = dict(counts)
    assert ctl.streams_opened == 1
    await asyncio.to_thread(informerd_daemon.restart)
    await eventually(
        lambda: all(counts[k] > before[k] for k in keys), "every object reconciled again", 90
    )
    assert ctl.streams_opened >= 2
    assert registry.get_sample_value(
        "informerd_sdk_work_reconnects_total", {"controller": "ctl-restart"}
    )
    info = await informerd_client.queues.get("ctl-restart")
    assert info.state.workers == 1
    await stop_controller(ctl, task)


async def test_a_requeue_waits_at_the_priority_its_result_names(
    informerd_client: informerd.Client,
    fake_apiserver: FakeApiServer,
    registry: CollectorRegistry,
) -> None:
    seed_keys(fake_apiserver, "ctl-priority", 1)
    seen: list[int] = []

    async def reconcile(obj: KubeObject | None, ctx: Context) -> Result | None:
        seen.append(ctx.priority)
        if len(seen) == 1:
            return Result.requeue(priority=5)
        if len(seen) == 2:
            return Result.requeue_after(0, priority=-3)
        if len(seen) == 3:
            return Result.requeue()  # no priority: the key's own, -3
        return None

    ctl = Controller(
        "ctl-priority", informerd_client, rate_limiter=exponential(10, 200), registry=registry
    )
    ctl.for_("v1", "ConfigMap", namespace="ctl-priority")
    task = asyncio.create_task(ctl.run(reconcile))
    await eventually(lambda: len(seen) == 4, "4 reconciles")
    assert seen == [0, 5, -3, -3]
    await stop_controller(ctl, task)
    with pytest.raises(ValueError, match=r"Result.requeue: priority: must be in"):
        Result.requeue(priority=1_000_001)
    with pytest.raises(TypeError, match=r"Result.requeue_after: priority: want an int"):
        Result.requeue_after(1, priority=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"Result.requeue: priority: must be in"):
        dataclasses.replace(Result.requeue(), priority=-(10**9))


async def test_source_priorities_rank_the_initial_list_below_changes(
    informerd_client: informerd.Client,
    fake_apiserver: FakeApiServer,
    registry: CollectorRegistry,
) -> None:
    initial = seed_keys(fake_apiserver, "ctl-initial", 2)
    seen: dict[str, list[tuple[int, bool]]] = defaultdict(list)

    async def reconcile(obj: KubeObject | None, ctx: Context) -> Result | None:
        seen[ctx.key].append((ctx.priority, ctx.is_in_initial_list))
        return None

    ctl = Controller("ctl-initial", informerd_client, registry=registry)
    ctl.for_(
        "v1",
        "ConfigMap",
        namespace="ctl-initial",
        priorities=source_priorities(initial_list=LOW_PRIORITY),
    )
    task = asyncio.create_task(ctl.run(reconcile))
    await eventually(lambda: set(seen) == initial, "the initial list")
    assert all(seen[k] == [(LOW_PRIORITY, True)] for k in initial), seen
    fake_apiserver.put_configmap("ctl-initial", "changed", {"a": "b"})
    await eventually(lambda: seen["ctl-initial/changed"] == [(0, False)], "the change, at 0")
    await stop_controller(ctl, task)
    with pytest.raises(TypeError, match="priorities"):
        ctl.owns("v1", "Pod", priorities={"initial_list": -1})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"initial_list: must be in -1000000..1000000"):
        source_priorities(initial_list=-2_000_000)


async def test_outcomes_map_to_retries_requeues_and_metrics(
    informerd_client: informerd.Client,
    fake_apiserver: FakeApiServer,
    registry: CollectorRegistry,
) -> None:
    seed_keys(fake_apiserver, "ctl-outcomes", 5)
    ns = "ctl-outcomes/seed-000000"
    calls: dict[str, list[tuple[float, int]]] = defaultdict(list)

    async def reconcile(obj: KubeObject | None, ctx: Context) -> Result | None:
        calls[ctx.key].append((time.monotonic(), ctx.requeues))
        assert ctx.namespace == "ctl-outcomes"
        assert ctx.name == ctx.key.split("/")[1]
        ctx.logger.info("reconciling")
        n = len(calls[ctx.key])
        if ctx.key == ns + "1" and ctx.requeues < 3:
            raise ValueError("not yet")
        if ctx.key == ns + "2":
            raise TerminalError("cannot ever work")
        if ctx.key == ns + "3" and n == 1:
            return Result.requeue_after(0.5)
        if ctx.key == ns + "4" and n == 1:
            return Result.requeue()
        return None

    ctl = Controller(
        "ctl-outcomes",
        informerd_client,
        concurrency=2,
        rate_limiter=exponential(10, 200),
        registry=registry,
    )
    ctl.for_("v1", "ConfigMap", namespace="ctl-outcomes")
    task = asyncio.create_task(ctl.run(reconcile))
    await eventually(lambda: len(calls[ns + "1"]) == 4, "4 reconciles of the failing key")
    await eventually(lambda: len(calls[ns + "3"]) == 2, "the requeue_after")
    await eventually(lambda: len(calls[ns + "4"]) == 2, "the requeue")
    assert [r for _, r in calls[ns + "1"]] == [0, 1, 2, 3]
    (t1, _), (t2, requeues) = calls[ns + "3"]
    assert t2 - t1 >= 0.45
    assert requeues == 0  # requeue_after forgets
    assert [r for _, r in calls[ns + "4"]] == [0, 1]
    assert len(calls[ns + "2"]) == 1
    assert await informerd_client.queues.num_requeues("ctl-outcomes", ns + "2") == 0

    await eventually(lambda: queue_idle(informerd_client, "ctl-outcomes"), "the queue idle")
    assert len(calls[ns + "2"]) == 1  # the terminal error was not retried

    def sample(name: str, **labels: str) -> float:
        value = registry.get_sample_value(name, {"controller": "ctl-outcomes", **labels})
        return value or 0.0

    assert sample("controller_runtime_reconcile_total", result="error") == 4
    assert sample("controller_runtime_reconcile_errors_total") == 4
    assert sample("controller_runtime_terminal_reconcile_errors_total") == 1
    assert sample("controller_runtime_reconcile_total", result="requeue_after") == 1
    assert sample("controller_runtime_reconcile_total", result="requeue") == 1
    assert sample("controller_runtime_reconcile_total", result="success") == 4
    assert sample("controller_runtime_reconcile_time_seconds_count") == 10
    assert sample("controller_runtime_max_concurrent_reconciles") == 2
    assert sample("controller_runtime_active_workers") == 0
    await stop_controller(ctl, task)


async def test_max_batch_reconciles_every_key_and_counts_each_once(
    informerd_client: informerd.Client,
    fake_apiserver: FakeApiServer,
    registry: CollectorRegistry,
) -> None:
    keys = seed_keys(fake_apiserver, "ctl-batch", 30)
    seen: list[tuple[str, str, str, str, int, str | None]] = []

    async def reconcile(obj: KubeObject | None, ctx: Context) -> None:
        obj_key = obj.key if obj is not None else None
        seen.append((ctx.key, ctx.namespace, ctx.name, ctx.object_key, ctx.token, obj_key))
        await asyncio.sleep(0.01)

    ctl = Controller("ctl-batch", informerd_client, concurrency=4, max_batch=1, registry=registry)
    assert ctl.max_batch == 1
    ctl.for_("v1", "ConfigMap", namespace="ctl-batch")
    task = asyncio.create_task(ctl.run(reconcile))
    await eventually(lambda: {s[0] for s in seen} == keys, "every key reconciled")
    await eventually(lambda: queue_idle(informerd_client, "ctl-batch"), "the queue idle")
    for key, namespace, name, object_key, token, obj_key in seen:
        assert (namespace, name, object_key, obj_key) == ("ctl-batch", key.split("/")[1], key, key)
        assert token > 0

    def sample(name: str, **labels: str) -> float:
        value = registry.get_sample_value(name, {"controller": "ctl-batch", **labels})
        return value or 0.0

    assert len(seen) == 30
    assert sample("controller_runtime_reconcile_total", result="success") == 30
    assert sample("controller_runtime_reconcile_time_seconds_count") == 30
    assert sample("controller_runtime_reconcile_time_seconds_sum") >= 30 * 0.01
    assert sample("controller_runtime_active_workers") == 0
    await stop_controller(ctl, task)


async def test_sync_reconcilers_run_on_the_controllers_threads(
    informerd_client: informerd.Client,
    fake_apiserver: FakeApiServer,
    registry: CollectorRegistry,
) -> None:
    keys = seed_keys(fake_apiserver, "ctl-sync", 10)
    seen: dict[str, str] = {}
    lock = threading.Lock()

    def reconcile(obj: KubeObject | None, ctx: Context) -> Result:
        assert obj is not None
        time.sleep(0.01)
        with lock:
            seen[obj.key] = threading.current_thread().name
        return Result.done()

    ctl = Controller("ctl-sync", informerd_client, concurrency=3, registry=registry)
    ctl.for_("v1", "ConfigMap", namespace="ctl-sync")
    task = asyncio.create_task(ctl.run(reconcile))
    await eventually(lambda: set(seen) == keys, "every object reconciled")
    threads = set(seen.values())
    assert all(t.startswith("reconcile-ctl-sync") for t in threads)
    assert len(threads) <= 3
    await stop_controller(ctl, task)


async def test_heartbeats_keep_a_long_reconcile_past_the_lease_timeout(
    informerd_client: informerd.Client,
    fake_apiserver: FakeApiServer,
    registry: CollectorRegistry,
) -> None:
    keys = seed_keys(fake_apiserver, "ctl-long", 1)
    done: list[str] = []

    async def reconcile(obj: KubeObject | None, ctx: Context) -> None:
        await asyncio.sleep(2.5)
        done.append(ctx.key)

    ctl = Controller(
        "ctl-long", informerd_client, lease_timeout_s=1, registry=registry, concurrency=1
    )
    ctl.for_("v1", "ConfigMap", namespace="ctl-long")
    task = asyncio.create_task(ctl.run(reconcile))
    await eventually(lambda: bool(done), "the long reconcile finished")
    await eventually(lambda: queue_idle(informerd_client, "ctl-long"), "its outcome applied")
    info = await informerd_client.queues.get("ctl-long")
    assert info.state.expired_leases == 0
    assert done == sorted(keys)
    await stop_controller(ctl, task)


async def test_bad_definitions_raise_clear_errors(
    informerd_client: informerd.Client, registry: CollectorRegistry
) -> None:
    with pytest.raises(ValueError, match="name"):
        Controller("Bad_Name", informerd_client, registry=registry)
    with pytest.raises(ValueError, match="concurrency"):
        Controller("ok", informerd_client, concurrency=0, registry=registry)
    with pytest.raises(ValueError, match="lease_timeout_s"):
        Controller("ok", informerd_client, lease_timeout_s=0.1, registry=registry)
    with pytest.raises(ValueError, match="max_batch"):
        Controller("ok", informerd_client, concurrency=4, max_batch=5, registry=registry)
    with pytest.raises(TypeError, match="max_batch"):
        Controller("ok", informerd_client, max_batch=1.0, registry=registry)  # type: ignore[arg-type]
    ctl = Controller("ctl-bad", informerd_client, registry=registry)
    with pytest.raises(TypeError, match="predicates"):
        ctl.for_("v1", "ConfigMap", predicates=["generation"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="for_"):
        await asyncio.wait_for(ctl.run(lambda obj, ctx: None), 30)
    ctl.for_("v1", "ConfigMapp", namespace="ctl-bad")
    with pytest.raises(informerd.NotFound) as e:
        await asyncio.wait_for(ctl.run(lambda obj, ctx: None), 30)
    assert e.value.reason == "RESOURCE_NOT_FOUND"
    other = Controller("ctl-bad2", informerd_client, registry=registry)
    other.for_("v1", "ConfigMap", namespace="ctl-bad")
    other.watches("v1", "Secret", index="missing")
    with pytest.raises(ValueError, match="missing"):
        await asyncio.wait_for(other.run(lambda obj, ctx: None), 30)


# --- generation_changed on a resource with a status subresource -----------------------------


def _http(api: FakeApiServer, method: str, path: str, body: object, ctype: str) -> Any:
    req = urllib.request.Request(api.url + path, data=json.dumps(body).encode(), method=method)
    req.add_header("Content-Type", ctype)
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


async def test_a_status_write_does_not_retrigger_with_generation_changed(
    informerd_client: informerd.Client,
    fake_apiserver: FakeApiServer,
    registry: CollectorRegistry,
) -> None:
    """The fake bumps metadata.generation as the real server does for custom resources with a
    status subresource (on any change but metadata/status), so this is faithful there."""
    api = fake_apiserver
    group, ns = "ctltest.example.com", "ctl-status"
    api.control(
        "/_fake/resources",
        {
            "group": group,
            "version": "v1",
            "resource": "gadgets",
            "kind": "Gadget",
            "namespaced": True,
            "customResource": True,
            "status": True,
            "generation": "nonmetadata",
        },
    )
    _http(api, "POST", "/api/v1/namespaces", {"metadata": {"name": ns}}, "application/json")
    base = f"/apis/{group}/v1/namespaces/{ns}/gadgets"
    gadget = {"apiVersion": f"{group}/v1", "kind": "Gadget", "metadata": {"name": "g1"}}
    _http(api, "POST", base, {**gadget, "spec": {"size": 1}}, "application/json")
    seen: list[tuple[int, Any]] = []  # g1's reconciles
    barriers: list[str] = []

    async def reconcile(obj: KubeObject | None, ctx: Context) -> None:
        assert obj is not None
        if ctx.name != "g1":
            barriers.append(ctx.name)
            return
        seen.append((obj.generation, obj.body.get("status")))
        await asyncio.to_thread(
            _http,
            api,
            "PATCH",
            f"{base}/{ctx.name}/status",
            {"status": {"observedGeneration": obj.generation}},
            "application/merge-patch+json",
        )

    ctl = Controller("ctl-status", informerd_client, registry=registry)
    ctl.for_(f"{group}/v1", "Gadget", namespace=ns, predicates=[generation_changed()])
    task = asyncio.create_task(ctl.run(reconcile))

    async def status_cached(generation: int) -> bool:
        if ctl.for_informer is None:
            return False  # not ensured yet
        obj = await ctl.for_informer.get(f"{ns}/g1")
        status = obj.body.get("status") if obj else None
        return isinstance(status, dict) and status.get("observedGeneration") == generation

    async def barrier(name: str) -> None:
        # Made after g1's status reached the cache: the source maps the informer's events in
        # order, and the queue (concurrency 1) hands keys out in order, so once this object is
        # reconciled, a reconcile the status write had caused would have been seen first.
        _http(api, "POST", base, {**gadget, "metadata": {"name": name}}, "application/json")
        await eventually(lambda: name in barriers, f"{name} reconciled")

    await eventually(lambda: status_cached(1), "the first status write cached")
    await barrier("barrier-1")
    assert seen == [(1, None)]
    # A spec change bumps the generation and reconciles again.
    _http(api, "PATCH", f"{base}/g1", {"spec": {"size": 2}}, "application/merge-patch+json")
    await eventually(lambda: status_cached(2), "the second status write cached")
    await barrier("barrier-2")
    assert [g for g, _ in seen] == [1, 2]
    assert seen[1][1] == {"observedGeneration": 1}
    await stop_controller(ctl, task)


async def test_stop_drains_in_flight_reconciles(
    informerd_client: informerd.Client,
    fake_apiserver: FakeApiServer,
    registry: CollectorRegistry,
) -> None:
    seed_keys(fake_apiserver, "ctl-stop", 6)
    started: list[str] = []
    finished: list[str] = []
    gate = asyncio.Event()

    async def reconcile(obj: KubeObject | None, ctx: Context) -> None:
        started.append(ctx.key)
        await gate.wait()
        finished.append(ctx.key)

    ctl = Controller("ctl-stop", informerd_client, concurrency=3, registry=registry)
    ctl.for_("v1", "ConfigMap", namespace="ctl-stop")
    task = asyncio.create_task(ctl.run(reconcile))
    await eventually(lambda: len(started) == 3, "3 reconciles in flight")
    active = {"controller": "ctl-stop"}
    assert registry.get_sample_value("controller_runtime_active_workers", active) == 3
    ctl.stop()
    await asyncio.sleep(0.2)
    assert not task.done()  # waiting for the in-flight reconciles
    gate.set()
    await asyncio.wait_for(task, 30)
    assert sorted(finished) == sorted(started)
    assert len(started) == 3  # nothing new after the drain
    state = (await informerd_client.queues.get("ctl-stop")).state
    assert state.in_flight == 0
    assert state.depth == 3  # the rest waits for the next worker
    # The controller runs again and takes the rest; stop() before run() makes run return.
    task = asyncio.create_task(ctl.run(reconcile))
    await eventually(lambda: len(finished) == 6, "the rest reconciled")
    await stop_controller(ctl, task)
    ctl.stop()
    await asyncio.wait_for(ctl.run(reconcile), 30)


async def test_a_lost_stream_cancels_in_flight_reconciles_and_redelivers(
    informerd_daemon: Daemon,
    informerd_client: informerd.Client,
    fake_apiserver: FakeApiServer,
    registry: CollectorRegistry,
) -> None:
    keys = seed_keys(fake_apiserver, "ctl-loss", 2)
    tokens: dict[str, list[int]] = defaultdict(list)
    cancelled: list[int] = []

    async def reconcile(obj: KubeObject | None, ctx: Context) -> None:
        tokens[ctx.key].append(ctx.token)
        if len(tokens[ctx.key]) == 1:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.append(ctx.token)
                raise

    ctl = Controller("ctl-loss", informerd_client, concurrency=2, registry=registry)
    ctl.for_("v1", "ConfigMap", namespace="ctl-loss")
    task = asyncio.create_task(ctl.run(reconcile))
    await eventually(lambda: set(tokens) == keys, "both keys in flight")
    # The daemon dies (its state with it) and comes back: the stream breaks.
    await asyncio.to_thread(informerd_daemon.restart, signal.SIGKILL)
    await eventually(lambda: all(len(tokens[k]) == 2 for k in keys), "both reconciled again", 90)
    assert sorted(cancelled) == sorted(t[0] for t in tokens.values())
    assert all(t[1] > t[0] for t in tokens.values())
    await eventually(lambda: queue_idle(informerd_client, "ctl-loss"), "the queue idle")
    # The cancelled reconciles sent nothing: nothing was refused.
    assert not registry.get_sample_value(
        "informerd_sdk_work_refusals_total", {"controller": "ctl-loss", "reason": "KEY_NOT_HELD"}
    )
    await stop_controller(ctl, task)


async def test_a_cancelled_sync_reconcile_keeps_its_key_from_new_work_until_it_returns(
    informerd_daemon: Daemon,
    informerd_client: informerd.Client,
    fake_apiserver: FakeApiServer,
    registry: CollectorRegistry,
) -> None:
    """A sync reconcile's thread outlives its broken stream: it sees ``ctx.cancelled``, and the
    controller takes no new work (no new stream) until the thread returns, so this process never
    runs two reconciles of the key at once. Concurrency 2: a free thread would take the key again
    at once if the controller reconnected (it did, before)."""
    keys = seed_keys(fake_apiserver, "ctl-syncloss", 1)
    gate = threading.Event()
    lock = threading.Lock()
    spans: list[tuple[str, float]] = []  # ("start" | "end", monotonic), in order
    saw_cancelled: list[bool] = []

    def reconcile(obj: KubeObject | None, ctx: Context) -> None:
        with lock:
            first = not spans
            spans.append(("start", time.monotonic()))
        try:
            if first:
                gate.wait(120)
                saw_cancelled.append(ctx.cancelled)
        finally:
            with lock:
                spans.append(("end", time.monotonic()))

    def abandoned() -> float:
        return (
            registry.get_sample_value(
                "informerd_sdk_abandoned_reconciles", {"controller": "ctl-syncloss"}
            )
            or 0.0
        )

    ctl = Controller("ctl-syncloss", informerd_client, concurrency=2, registry=registry)
    ctl.for_("v1", "ConfigMap", namespace="ctl-syncloss")
    task = asyncio.create_task(ctl.run(reconcile))
    await eventually(lambda: len(spans) == 1, "the first reconcile in its thread")
    await asyncio.to_thread(informerd_daemon.restart, signal.SIGKILL)
    # Either the controller waits for the thread (it says so), or it took the key again.
    await eventually(
        lambda: abandoned() == 1 or sum(k == "start" for k, _ in spans) > 1,
        "the controller waiting for the cancelled thread",
        60,
    )
    gate.set()
    await eventually(lambda: len(spans) >= 4, "the key reconciled again", 90)
    with lock:
        kinds = [k for k, _ in spans]
    # The first reconcile ended before the second began: never two at once.
    assert kinds[:4] == ["start", "end", "start", "end"], spans
    assert saw_cancelled == [True]
    assert abandoned() == 0
    assert len(keys) == 1
    await stop_controller(ctl, task)


async def test_a_drain_timeout_cancels_hung_reconciles(
    informerd_client: informerd.Client,
    fake_apiserver: FakeApiServer,
    registry: CollectorRegistry,
) -> None:
    keys = seed_keys(fake_apiserver, "ctl-hung", 1)
    started: list[str] = []

    async def reconcile(obj: KubeObject | None, ctx: Context) -> None:
        started.append(ctx.key)
        await asyncio.sleep(3600)

    ctl = Controller("ctl-hung", informerd_client, registry=registry)
    ctl.for_("v1", "ConfigMap", namespace="ctl-hung")
    task = asyncio.create_task(ctl.run(reconcile, drain_timeout_s=0.5))
    await eventually(lambda: started == sorted(keys), "the reconcile in flight")
    ctl.stop()
    await asyncio.wait_for(task, 30)

    async def given_back() -> bool:
        state = (await informerd_client.queues.get("ctl-hung")).state
        return state.in_flight == 0 and state.depth == 1

    await eventually(given_back, "the key back in the queue")


def _apply(api: FakeApiServer, path: str, body: dict[str, Any]) -> Any:
    return _http(api, "POST", path, body, "application/json")


async def test_owns_and_watches_enqueue_the_owner_and_the_indexed_objects(
    informerd_client: informerd.Client,
    fake_apiserver: FakeApiServer,
    registry: CollectorRegistry,
) -> None:
    api, ns = fake_apiserver, "ctl-owns"
    _apply(api, "/api/v1/namespaces", {"metadata": {"name": ns}})
    dep = _apply(
        api,
        f"/apis/apps/v1/namespaces/{ns}/deployments",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            # The daemon's field paths do not walk arrays mid-path (field_path.cc), so
            # spec.template.spec.volumes.configMap.name indexes nothing: a label says which
            # ConfigMap the Deployment uses.
            "metadata": {"name": "web", "labels": {"config": "settings"}},
        },
    )
    counts: Counter[str] = Counter()

    async def reconcile(obj: KubeObject | None, ctx: Context) -> None:
        counts[ctx.key] += 1

    ctl = Controller("ctl-owns", informerd_client, registry=registry)
    ctl.for_(
        "apps/v1",
        "Deployment",
        namespace=ns,
        indexes={"configmaps": label_index("config")},
    )
    ctl.owns("v1", "Pod")
    ctl.watches("v1", "ConfigMap", index="configmaps", value_from="name")
    task = asyncio.create_task(ctl.run(reconcile))
    key = f"{ns}/web"
    await eventually(lambda: counts[key] >= 1, "the Deployment reconciled")
    await eventually(lambda: queue_idle(informerd_client, "ctl-owns"), "the queue idle")
    before = counts[key]
    owner = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "web",
        "uid": dep["metadata"]["uid"],
        "controller": True,
    }
    _apply(
        api,
        f"/api/v1/namespaces/{ns}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web-1", "ownerReferences": [owner]},
        },
    )
    await eventually(lambda: counts[key] > before, "the owned Pod enqueued its Deployment")
    await eventually(lambda: queue_idle(informerd_client, "ctl-owns"), "the queue idle")
    before = counts[key]
    _apply(
        api,
        f"/api/v1/namespaces/{ns}/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}},
    )
    await eventually(lambda: counts[key] > before, "the used ConfigMap enqueued the Deployment")
    assert set(counts) == {key}
    await stop_controller(ctl, task)


async def test_resync_reconciles_every_object_again_each_period(
    informerd_client: informerd.Client,
    fake_apiserver: FakeApiServer,
    registry: CollectorRegistry,
) -> None:
    keys = seed_keys(fake_apiserver, "ctl-resync", 3)
    seen: dict[str, list[float]] = defaultdict(list)

    async def reconcile(obj: KubeObject | None, ctx: Context) -> None:
        assert obj is not None  # a resync hands out the current object
        seen[ctx.key].append(time.monotonic())

    ctl = Controller(
        "ctl-resync", informerd_client, concurrency=2, resync_period_s=1, registry=registry
    )
    ctl.for_("v1", "ConfigMap", namespace="ctl-resync")
    task = asyncio.create_task(ctl.run(reconcile))
    # Nothing changes: only the period brings the objects back, each at least three times.
    await eventually(lambda: all(len(seen[k]) >= 3 for k in keys), "three resyncs of each", 60)
    ctl.stop()
    await asyncio.wait_for(task, 30)
    for k in keys:
        # Once per period (plus the first reconcile), not a hot loop.
        span = seen[k][-1] - seen[k][0]
        assert len(seen[k]) <= span / 1.0 + 2, f"{k}: {len(seen[k])} reconciles in {span:.1f} s"
