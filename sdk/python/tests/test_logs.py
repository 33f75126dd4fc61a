"""The daemon's logs as log pipelines read them: with --log_format=json every line of its stderr
is one JSON object, and a failed reconcile carries the queue, worker, key, token and error as
fields; the default text format carries the same fields as key=value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import informerd
from informerd.queues import queue_spec
from informerd.testing import Daemon, FakeApiServer, eventually
from informerd.work import Outcome, WorkStream


async def fail_one_reconcile(daemon: Daemon) -> int:
    """A worker on a new queue reports RETRY with an error for one key; returns its token."""
    async with informerd.Client.connect(daemon.target, timeout_s=20) as client:
        await client.queues.create(queue_spec("logs-q"))
        await client.queues.add("logs-q", ["demo/web"])
        async with WorkStream(client, "logs-q", max_in_flight=1, worker_name="logs") as stream:
            leases = await stream.receive()
            assert leases
            stream.complete(leases[0], Outcome.RETRY, error='boom: "quoted"\nsecond line')
            await eventually(lambda: "reconcile failed" in daemon.log.read_text(), "the log line")
            return leases[0].token


async def test_json_logs_are_one_object_per_line_with_fields(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    with Daemon.start(
        fake_apiserver.kubeconfig, tmp_path, extra_args=["--log_format=json"]
    ) as daemon:
        token = await fail_one_reconcile(daemon)
        lines = daemon.log.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line is JSON
    assert all({"time", "level", "logger", "msg"} <= set(r) for r in records)
    failed = next(r for r in records if r["msg"] == "reconcile failed")
    assert failed["level"] == "warning"
    assert failed["queue"] == "logs-q"
    assert failed["key"] == "demo/web"
    assert failed["token"] == str(token)
    assert failed["error"] == 'boom: "quoted"\nsecond line'
    assert failed["worker"]


async def test_text_logs_carry_the_fields_as_key_value(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    with Daemon.start(fake_apiserver.kubeconfig, tmp_path) as daemon:
        token = await fail_one_reconcile(daemon)
        line = next(
            line for line in daemon.log.read_text().splitlines() if "reconcile failed" in line
        )
    assert "[warning] reconcile failed queue=logs-q worker=" in line
    assert f"key=demo/web token={token}" in line
    assert line.endswith(r'error="boom: \"quoted\"\nsecond line"')


def test_a_bad_log_format_stops_start_up_naming_it(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    with pytest.raises(RuntimeError, match='"xml" is not text or json'):
        Daemon.start(fake_apiserver.kubeconfig, tmp_path, extra_args=["--log_format=xml"])
