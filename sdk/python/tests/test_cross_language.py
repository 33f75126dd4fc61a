"""Rust and Python workers on one queue: the daemon's exclusion and redelivery hold across SDKs.

The Rust workers are the Rust SDK's ``oracle_worker`` example (sdk/rust/informerd/examples),
which takes the Python oracle worker's flags and writes its record (CLOCK_MONOTONIC timestamps,
comparable across processes), so the oracle of test_controller.py checks both at once. The
binary's path comes from ``INFORMERD_RUST_ORACLE_WORKER``; ``make test-rust`` (tools/test_rust)
builds it and runs this module. ``make test-python`` leaves the module out.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable

import pytest

import informerd
from informerd.testing import Daemon, FakeApiServer, eventually, queue_idle
from tests.test_controller import (  # the oracle: one implementation for both suites
    Interval,
    Oracle,
    assert_no_overlap,
    oracle_factory,  # noqa: F401 (a fixture)
    seed_keys,
    workers_attached,
)

ENV = "INFORMERD_RUST_ORACLE_WORKER"


@pytest.fixture
def rust_worker() -> tuple[str, ...]:
    path = os.environ.get(ENV, "")
    if not path or not os.access(path, os.X_OK):
        pytest.fail(
            f"{ENV} must name the Rust oracle worker (got {path!r}): "
            "cd sdk/rust && cargo build --example oracle_worker; "
            "or run make test-rust, which builds it and runs this module"
        )
    return (path,)


def sigterm(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to each worker; each drains and exits 0."""
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(60) == 0, f"pid {proc.pid} exited {proc.returncode}"


def finished_after(oracle: Oracle, t: float) -> dict[str, list[Interval]]:
    by_key: dict[str, list[Interval]] = {}
    for iv in oracle.intervals():
        if iv.end is not None and iv.start > t:
            by_key.setdefault(iv.key, []).append(iv)
    return by_key


async def test_rust_and_python_workers_killed_mid_reconcile_lose_nothing(
    informerd_daemon: Daemon,
    informerd_client: informerd.Client,
    fake_apiserver: FakeApiServer,
    oracle_factory: Callable[[str, str, str], Oracle],  # noqa: F811
    rust_worker: tuple[str, ...],
) -> None:
    oracle = oracle_factory(informerd_daemon.target, "x-kill", "x-kill")
    hang = {"rust": oracle.dir / "rust.hang", "python": oracle.dir / "python.hang"}
    rust_victim = oracle.spawn(sleep_s=0.15, hang_file=hang["rust"], program=rust_worker)
    py_victim = oracle.spawn(sleep_s=0.15, hang_file=hang["python"])
    rust_survivor = oracle.spawn(sleep_s=0.15, program=rust_worker)
    py_survivor = oracle.spawn(sleep_s=0.15)
    victims = {"rust": rust_victim, "python": py_victim}
    await workers_attached(informerd_client, "x-kill", 4)
    keys = seed_keys(fake_apiserver, "x-kill", 200)

    # As in test_controller's kill test: the victims wedge near the end of the backlog, so the
    # redelivery time measures the daemon noticing the lost streams.
    await eventually(lambda: len(oracle.finished_keys()) >= 150, "150 objects reconciled", 120)
    for f in hang.values():
        f.touch()
    hung_from = time.monotonic()

    def both_hung() -> bool:
        return all(
            any(iv.start > hung_from for iv in oracle.open_of(p.pid)) for p in victims.values()
        )

    await eventually(both_hung, "a Rust and a Python worker mid-reconcile", 120)
    killed_at: dict[int, float] = {}
    held: list[Interval] = []
    for proc in victims.values():
        killed_at[proc.pid] = time.monotonic()
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        held += oracle.open_of(proc.pid)
    assert {iv.pid for iv in held} == set(killed_at), "each victim was mid-reconcile"

    await eventually(lambda: oracle.finished_keys() >= keys, "every object reconciled", 120)
    intervals = oracle.intervals()
    assert_no_overlap(intervals, killed_at)
    survivors = {rust_survivor.pid, py_survivor.pid}
    # Both languages did real work on the shared queue.
    for pid in survivors:
        assert any(iv.pid == pid and iv.end is not None for iv in intervals), pid
    for iv in held:
        dead_at = killed_at[iv.pid]
        again = [o.start for o in intervals if o.key == iv.key and o.pid in survivors]
        again = [t for t in again if t > dead_at]
        assert again, f"{iv.key} (held by pid {iv.pid}) was not redelivered"
        assert min(again) - dead_at < 10, f"{iv.key} redelivered after {min(again) - dead_at} s"
        print(f"{iv.key} redelivered {min(again) - dead_at:.3f} s after the kill")
    sigterm([rust_survivor, py_survivor])


async def test_sigterm_drains_rust_and_python_workers_and_loses_nothing(
    informerd_daemon: Daemon,
    informerd_client: informerd.Client,
    fake_apiserver: FakeApiServer,
    oracle_factory: Callable[[str, str, str], Oracle],  # noqa: F811
    rust_worker: tuple[str, ...],
) -> None:
    oracle = oracle_factory(informerd_daemon.target, "x-term", "x-term")
    leaving = [
        oracle.spawn(sleep_s=0.3, concurrency=3, program=rust_worker),
        oracle.spawn(sleep_s=0.3, concurrency=3),
    ]
    staying = [oracle.spawn(sleep_s=0.05, program=rust_worker), oracle.spawn(sleep_s=0.05)]
    await workers_attached(informerd_client, "x-term", 4)
    keys = seed_keys(fake_apiserver, "x-term", 120)

    def leaving_busy() -> bool:
        return all(oracle.open_of(p.pid) for p in leaving)

    await eventually(leaving_busy, "both leaving workers mid-reconcile", 60)
    sigterm(leaving)
    for proc in leaving:
        # Every reconcile it started finished: none was cut off by the drain.
        assert not oracle.open_of(proc.pid), f"pid {proc.pid} left a reconcile unfinished"
    await eventually(lambda: oracle.finished_keys() >= keys, "every object reconciled", 120)
    assert_no_overlap(oracle.intervals(), {})
    sigterm(staying)


async def test_a_daemon_restart_reconnects_rust_and_python_workers_and_reconciles_all(
    informerd_daemon: Daemon,
    informerd_client: informerd.Client,
    fake_apiserver: FakeApiServer,
    oracle_factory: Callable[[str, str, str], Oracle],  # noqa: F811
    rust_worker: tuple[str, ...],
) -> None:
    oracle = oracle_factory(informerd_daemon.target, "x-restart", "x-restart")
    rust = oracle.spawn(sleep_s=0.1, program=rust_worker)
    python = oracle.spawn(sleep_s=0.1)
    await workers_attached(informerd_client, "x-restart", 2)
    keys = seed_keys(fake_apiserver, "x-restart", 40)
    await eventually(lambda: oracle.finished_keys() >= keys, "every object reconciled", 120)
    await eventually(lambda: queue_idle(informerd_client, "x-restart"), "the queue idle")

    restarted_at = time.monotonic()
    informerd_daemon.restart()
    # The daemon lost its queue and informers: the workers reconnect, ensure them again, and
    # the new informer's initial list reconciles every object once more.
    await eventually(
        lambda: set(finished_after(oracle, restarted_at)) >= keys,
        "every object reconciled again after the restart",
        120,
    )
    await workers_attached(informerd_client, "x-restart", 2)
    assert rust.poll() is None, "the Rust worker exited on the restart"
    assert python.poll() is None, "the Python worker exited on the restart"

    # Both are back on the queue: changes now reach each of them.
    changed_at = time.monotonic()
    for key in sorted(keys):
        fake_apiserver.put_configmap("x-restart", key.split("/")[1], {"v": "2"})
    await eventually(
        lambda: set(finished_after(oracle, changed_at)) >= keys, "every change reconciled", 120
    )
    after = [iv for ivs in finished_after(oracle, changed_at).values() for iv in ivs]
    for proc, lang in ((rust, "Rust"), (python, "Python")):
        assert any(iv.pid == proc.pid for iv in after), f"the {lang} worker got no change"
    assert_no_overlap(oracle.intervals(), {})
    sigterm([rust, python])
