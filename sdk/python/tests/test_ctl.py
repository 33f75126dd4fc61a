"""informerctl as users run it: a real process against a real daemon on the fake API server,
checking what it prints and its exit codes (0 done, 1 refused or unreachable, 2 bad usage)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import informerd
from informerd.queues import queue_spec
from informerd.testing import Daemon, FakeApiServer
from informerd.testing.processes import repo_root
from informerd.work import Outcome, WorkStream

CTL = [sys.executable, "-m", "informerd.ctl"]


def ctl(daemon: Daemon | None, *args: str) -> subprocess.CompletedProcess[str]:
    target = ["--target", daemon.target] if daemon is not None else []
    return subprocess.run(
        [*CTL, *target, *args], capture_output=True, text=True, timeout=60, check=False
    )


def ok(daemon: Daemon, *args: str) -> str:
    result = ctl(daemon, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines() if line.strip()]


async def configmaps(
    client: informerd.Client, api: FakeApiServer, namespace: str, count: int
) -> informerd.Informer:
    api.create_namespace(namespace)
    for i in range(count):
        api.put_configmap(namespace, f"cm-{i}", {"i": str(i)}, labels={"parity": str(i % 2)})
    informer = await client.informers.ensure("v1", "ConfigMap", namespace=namespace)
    await informer.wait_for_sync(timeout_s=30)
    return informer


def test_the_console_script_is_installed_with_the_sdk() -> None:
    script = Path(sys.executable).parent / "informerctl"
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0
    for command in ("informers", "queues", "workers", "get", "list", "watch", "queue", "top"):
        assert command in result.stdout


def _kubectl(bindir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real kubectl that tools/test_python builds (testing/kube/kubectl, or $KUBECTL_BIN),
    with ``bindir`` first on its PATH."""
    path = Path(os.environ.get("KUBECTL_BIN") or (repo_root() or Path.cwd()) / "out" / "kubectl")
    assert path.exists(), f"{path}: build it with testing/kube/kubectl --build-only"
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(
        [str(path), *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


async def test_kubectl_runs_it_as_the_informerd_plugin(
    informerd_daemon: Daemon, informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    informer = await configmaps(informerd_client, fake_apiserver, "ctl-plugin", 2)
    # kubectl's plugin rule: an executable kubectl-informerd on PATH is `kubectl informerd`.
    bindir = Path(sys.executable).parent
    assert (bindir / "kubectl-informerd").exists()
    plugins = _kubectl(bindir, "plugin", "list")
    assert str(bindir / "kubectl-informerd") in plugins.stdout, plugins.stderr
    listed = _kubectl(
        bindir, "informerd", "--target", informerd_daemon.target, "informers", "-o", "name"
    )
    assert listed.returncode == 0, listed.stderr
    assert informer.id in listed.stdout.split()
    usage = _kubectl(bindir, "informerd", "no-such-command")
    assert usage.returncode == 2
    assert usage.stderr.startswith("usage: kubectl informerd"), usage.stderr


async def test_informers_print_as_tables_json_yaml_and_names(
    informerd_daemon: Daemon, informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    informer = await configmaps(informerd_client, fake_apiserver, "ctl-informers", 3)
    table = rows(ok(informerd_daemon, "informers"))
    assert table[0] == [
        "ID",
        "RESOURCE",
        "NAMESPACE",
        "SYNCED",
        "OBJECTS",
        "REFLECTOR",
        "SUBSCRIBERS",
    ]
    assert [informer.id, "configmaps", "ctl-informers", "true", "3", "Watching", "0"] in table
    wide = rows(ok(informerd_daemon, "informers", "-o", "wide"))
    assert wide[0][7:10] == ["CLUSTER", "SELECTORS", "BYTES"]
    # JSON is Admin.ListInformers as the proto's JSON mapping (what grpcurl prints).
    listed = json.loads(ok(informerd_daemon, "informers", "-o", "json"))["informers"]
    admin = {i.id: i for i in await informerd_client.admin.informers()}
    assert {i["id"] for i in listed} == set(admin)
    mine = next(i for i in listed if i["id"] == informer.id)
    assert int(mine["state"]["objects"]) == admin[informer.id].state.objects == 3
    assert mine["state"]["synced"] is True
    assert yaml.safe_load(ok(informerd_daemon, "informers", "-o", "yaml")) == {"informers": listed}
    assert informer.id in ok(informerd_daemon, "informers", "-o", "name").split()


async def test_queues_and_workers_show_depth_in_flight_and_streams(
    informerd_daemon: Daemon, informerd_client: informerd.Client
) -> None:
    await informerd_client.queues.create(queue_spec("ctl-q", lease_timeout_s=30))
    await informerd_client.queues.add("ctl-q", ["a/1", "a/2", "a/3"])
    async with WorkStream(
        informerd_client, "ctl-q", max_in_flight=1, worker_name="ctl-worker"
    ) as stream:
        leases = await stream.receive()
        assert leases is not None
        assert len(leases) == 1
        table = rows(ok(informerd_daemon, "queues"))
        assert table[0] == ["NAME", "DEPTH", "IN-FLIGHT", "DELAYED", "WORKERS", "ADDS", "RETRIES"]
        assert ["ctl-q", "2", "1", "0", "1", "3", "0"] in table
        wide = rows(ok(informerd_daemon, "queues", "-o", "wide"))
        assert wide[0][7:10] == ["SOURCES", "EXPIRED-LEASES", "LEASE-TIMEOUT"]
        assert "30s" in next(r for r in wide if r[0] == "ctl-q")
        workers = rows(ok(informerd_daemon, "workers", "ctl-q"))
        assert workers[0] == ["QUEUE", "WORKER", "IN-FLIGHT", "MAX-IN-FLIGHT", "DRAINING"]
        assert workers[1] == ["ctl-q", "ctl-worker", "1", "1", "false"]
        listed = json.loads(ok(informerd_daemon, "workers", "-o", "json"))["workers"]
        assert [(w["queue"], w["workerName"]) for w in listed] == [("ctl-q", "ctl-worker")]
        stream.complete(leases[0], Outcome.SUCCESS)
    missing = ctl(informerd_daemon, "workers", "no-such-queue")
    assert missing.returncode == 1
    assert "no-such-queue" in missing.stderr


async def test_get_and_list_read_through_an_informer_with_selectors_and_indexes(
    informerd_daemon: Daemon, informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    informer = await configmaps(informerd_client, fake_apiserver, "ctl-objects", 4)
    listed = rows(ok(informerd_daemon, "list", "configmaps", "-n", "ctl-objects"))
    assert listed[0] == ["NAMESPACE", "NAME", "RESOURCE-VERSION"]
    assert [r[1] for r in listed[1:]] == ["cm-0", "cm-1", "cm-2", "cm-3"]
    odd = ok(informerd_daemon, "list", informer.id, "-l", "parity=1", "-o", "name")
    assert odd.split() == ["ctl-objects/cm-1", "ctl-objects/cm-3"]
    indexed = ok(
        informerd_daemon, "list", informer.id, "--index", "namespace=ctl-objects", "-o", "json"
    )
    body = json.loads(indexed)
    assert body["kind"] == "List"
    assert len(body["items"]) == 4
    assert body["metadata"]["resourceVersion"]
    got = yaml.safe_load(
        ok(informerd_daemon, "get", "configmaps", "ctl-objects/cm-2", "-o", "yaml")
    )
    assert got["metadata"]["name"] == "cm-2"
    assert got["data"] == {"i": "2"}
    short = rows(
        ok(informerd_daemon, "get", "configmaps", "-n", "ctl-objects", "cm-1", "-o", "wide")
    )
    assert short[1][:2] == ["ctl-objects", "cm-1"]
    assert short[1][-1] == "parity=1"

    missing = ctl(informerd_daemon, "get", "configmaps", "ctl-objects/nope")
    assert missing.returncode == 1
    assert "ctl-objects/nope" in missing.stderr
    assert missing.stdout == ""
    unknown = ctl(informerd_daemon, "list", "secrets")
    assert unknown.returncode == 1
    assert "no informer 'secrets'" in unknown.stderr
    assert informer.id in unknown.stderr
    bad_index = ctl(informerd_daemon, "list", informer.id, "--index", "by-owner=x")
    assert bad_index.returncode == 1
    assert "index" in bad_index.stderr
    malformed = ctl(informerd_daemon, "list", informer.id, "--index", "novalue")
    assert malformed.returncode == 2
    assert "--index" in malformed.stderr
    bad_selector = ctl(informerd_daemon, "list", informer.id, "-l", "a in (")
    assert bad_selector.returncode == 1
    assert "label_selector" in bad_selector.stderr


async def test_two_informers_of_one_resource_must_be_named_by_id(
    informerd_daemon: Daemon, informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    await configmaps(informerd_client, fake_apiserver, "ctl-two-a", 1)
    await configmaps(informerd_client, fake_apiserver, "ctl-two-b", 1)
    both = ctl(informerd_daemon, "list", "configmaps")
    assert both.returncode == 2
    assert "name one by id" in both.stderr
    # A namespace picks the informer that watches it.
    assert ok(informerd_daemon, "list", "configmaps", "-n", "ctl-two-b", "-o", "name").split() == [
        "ctl-two-b/cm-0"
    ]


async def test_watch_tails_the_initial_objects_then_changes(
    informerd_daemon: Daemon, informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    informer = await configmaps(informerd_client, fake_apiserver, "ctl-watch", 2)
    proc = await asyncio.create_subprocess_exec(
        *CTL,
        "--target",
        informerd_daemon.target,
        "watch",
        informer.id,
        "-o",
        "json",
        "--max-events",
        "3",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    lines: list[dict[str, Any]] = []
    try:
        # The stream is open once the initial objects and SYNCED arrived.
        while len(lines) < 3:
            lines.append(json.loads(await asyncio.wait_for(proc.stdout.readline(), 30)))
        fake_apiserver.put_configmap("ctl-watch", "cm-0", {"i": "changed"})
        lines.append(json.loads(await asyncio.wait_for(proc.stdout.readline(), 30)))
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert [(e["type"], e.get("initial")) for e in lines] == [
        ("ADDED", True),
        ("ADDED", True),
        ("SYNCED", None),
        ("UPDATED", None),
    ]
    assert lines[3]["object"]["data"] == {"i": "changed"}


async def test_queue_add_len_forget_and_drain(
    informerd_daemon: Daemon, informerd_client: informerd.Client
) -> None:
    await informerd_client.queues.create(queue_spec("ctl-keys"))
    assert (
        ok(informerd_daemon, "queue", "add", "ctl-keys", "ns/a", "ns/b", "ns/c")
        == "queue/ctl-keys: 3 keys added\n"
    )
    assert ok(informerd_daemon, "queue", "len", "ctl-keys") == "3\n"
    assert (
        ok(informerd_daemon, "queue", "drain", "ctl-keys", "--max", "1").splitlines()[-1]
        == "queue/ctl-keys: 1 key drained"
    )
    assert ok(informerd_daemon, "queue", "len", "ctl-keys") == "2\n"
    drained = ok(informerd_daemon, "queue", "drain", "ctl-keys").splitlines()
    assert drained[-1] == "queue/ctl-keys: 2 keys drained"
    assert len(drained) == 3
    assert ok(informerd_daemon, "queue", "len", "ctl-keys") == "0\n"
    # Delayed and rate-limited adds wait before they count in Len.
    ok(informerd_daemon, "queue", "add", "ctl-keys", "ns/later", "--after", "1h")
    ok(informerd_daemon, "queue", "add", "ctl-keys", "ns/limited", "--rate-limited")
    info = await informerd_client.queues.get("ctl-keys")
    assert info.state.delayed >= 1
    assert await informerd_client.queues.num_requeues("ctl-keys", "ns/limited") == 1
    ok(informerd_daemon, "queue", "forget", "ctl-keys", "ns/limited")
    assert await informerd_client.queues.num_requeues("ctl-keys", "ns/limited") == 0
    # --priority: the key waits at it, and goes before the default priority's keys.
    await informerd_client.queues.create(queue_spec("ctl-prio"))
    ok(informerd_daemon, "queue", "add", "ctl-prio", "ns/low", "--priority", "-100")
    ok(informerd_daemon, "queue", "add", "ctl-prio", "ns/high", "--priority", "7")
    ok(informerd_daemon, "queue", "add", "ctl-prio", "ns/mid")
    info = await informerd_client.queues.get("ctl-prio")
    assert [(d.priority, d.depth) for d in info.state.depth_by_priority] == [
        (7, 1),
        (0, 1),
        (-100, 1),
    ]


async def test_top_prints_frames_with_rates(
    informerd_daemon: Daemon, informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    informer = await configmaps(informerd_client, fake_apiserver, "ctl-top", 2)
    await informerd_client.queues.create(queue_spec("ctl-top-q"))
    await informerd_client.queues.add("ctl-top-q", ["x"])
    proc = await asyncio.create_subprocess_exec(
        *CTL,
        "--target",
        informerd_daemon.target,
        "top",
        "--interval",
        "1s",
        "--iterations",
        "3",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    # The first frame (its informer table ends with a blank line), then two adds: the next two
    # frames count them.
    first_frame: list[str] = []
    while not (any(line.startswith("INFORMER") for line in first_frame) and first_frame[-1] == ""):
        first_frame.append((await asyncio.wait_for(proc.stdout.readline(), 30)).decode().rstrip())
    await informerd_client.queues.add("ctl-top-q", ["y", "z"])
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err
    frames = ("\n".join(first_frame) + "\n" + out.decode()).split("informerctl top")[1:]
    assert len(frames) == 3
    first = rows(frames[0])
    header = next(r for r in first if r[0] == "QUEUE")
    assert header == [
        "QUEUE",
        "DEPTH",
        "IN-FLIGHT",
        "DELAYED",
        "WORKERS",
        "ADDS/S",
        "RETRIES/S",
        "ADDS",
        "RETRIES",
    ]
    assert next(r for r in first if r[0] == "ctl-top-q")[5] == "-"
    last = next(r for r in rows(frames[2]) if r[0] == "ctl-top-q")
    assert last[1] == "3"
    assert last[7] == "3"
    rates = [float(next(r for r in rows(f) if r[0] == "ctl-top-q")[5]) for f in frames[1:]]
    assert sum(rates) > 0
    inf_row = next(r for r in rows(frames[2]) if r[0] == informer.id)
    assert inf_row[3:5] == ["true", "2"]


def test_bad_command_lines_exit_2_naming_what_is_wrong(informerd_daemon: Daemon) -> None:
    cases = [
        (["nonsense"], "invalid choice"),
        (["--timeout", "soon", "queues"], "--timeout"),
        (["queue", "add", "q", ""], "keys[0]"),
        (["queue", "add", "q", "k", "--after", "1s", "--rate-limited"], "--rate-limited"),
        (["queue", "add", "q", "k", "--after", "later"], "--after"),
        (["queue", "drain", "q", "--max", "-1"], "--max"),
        (["top", "--interval", "1ms"], "--interval"),
        (["informers", "-o", "xml"], "invalid choice"),
        (["--cert-file", "c.pem", "queues"], "client_key"),
        (["queue", "add", "Bad_Name", "k"], "'Bad_Name' is not a queue name"),
        (["queue", "add", "q", "k", "--priority", "high"], "--priority"),
        (["queue", "add", "q", "k", "--priority", "1000001"], "must be in -1000000..1000000"),
    ]
    for args, message in cases:
        result = ctl(informerd_daemon, *args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert message in result.stderr, (args, result.stderr)


def test_refusals_and_an_unreachable_daemon_exit_1(informerd_daemon: Daemon) -> None:
    refused = ctl(informerd_daemon, "queue", "len", "no-such-queue")
    assert refused.returncode == 1
    assert "NOT_FOUND" in refused.stderr
    assert "no-such-queue" in refused.stderr
    down = subprocess.run(
        [*CTL, "--target", "127.0.0.1:1", "--timeout", "2s", "queues"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert down.returncode == 1
    assert "UNAVAILABLE" in down.stderr or "DEADLINE_EXCEEDED" in down.stderr


async def test_bash_completion_offers_commands_flags_and_the_daemons_names(
    informerd_daemon: Daemon, informerd_client: informerd.Client, tmp_path: Path
) -> None:
    await informerd_client.queues.create(queue_spec("ctl-complete"))
    script = tmp_path / "informerctl.bash"
    script.write_text(ok(informerd_daemon, "completion", "bash"))
    shim = tmp_path / "informerctl"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m informerd.ctl "$@"\n')
    shim.chmod(0o755)

    def complete(*words: str) -> list[str]:
        line = " ".join(["informerctl", *words])
        program = (
            f'PATH="{tmp_path}:$PATH"; source "{script}"; '
            f"COMP_WORDS=({line}); COMP_CWORD={len(words)}; _informerctl; "
            'printf "%s\\n" "${COMPREPLY[@]}"'
        )
        result = subprocess.run(
            ["bash", "-c", program], capture_output=True, text=True, timeout=60, check=True
        )
        return result.stdout.split()

    assert {"queue", "queues"} <= set(complete("qu"))
    assert set(complete("queue", "")) == {"add", "drain", "forget", "len"}
    assert "--max" in complete("queue", "drain", "--m")
    assert "ctl-complete" in complete("--target", informerd_daemon.target, "queue", "len", "")
    # As bash splits them at "=" and ":" (COMP_WORDBREAKS): the daemon is still found.
    host, port = informerd_daemon.target.rsplit(":", 1)
    for flag in (("--target", "="), ("--target",)):
        words = (*flag, host, ":", port, "queue", "len", "")
        assert "ctl-complete" in complete(*words), words
    assert "ctl-complete" in complete(f"--target={informerd_daemon.target}", "queue", "len", "")
    zsh = ok(informerd_daemon, "completion", "zsh")
    assert zsh.startswith("autoload -U +X bashcompinit")


@pytest.mark.parametrize("fmt", ["json", "yaml"])
async def test_an_empty_daemon_prints_empty_lists(informerd_daemon: Daemon, fmt: str) -> None:
    text = ok(informerd_daemon, "queues", "-o", fmt)
    assert (json.loads(text) if fmt == "json" else yaml.safe_load(text)) == {"queues": []}
    assert rows(ok(informerd_daemon, "queues")) == [
        ["NAME", "DEPTH", "IN-FLIGHT", "DELAYED", "WORKERS", "ADDS", "RETRIES"]
    ]
