"""The daemon's live status page ("/" on the metrics listener) in a real browser: headless
Chromium loads it against a running daemon, and the numbers it renders must be Admin's. The
screenshot is kept as a test artifact (out/test-artifacts/status-page.png, or under
$INFORMERD_TEST_ARTIFACTS)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest

import informerd
from informerd.queues import queue_spec
from informerd.testing import Daemon, FakeApiServer
from informerd.testing.processes import repo_root
from informerd.work import WorkStream


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("no chromium on PATH: tools/bootstrap installs Debian's chromium")


def browse(url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """Chromium, headless, on ``url`` for 5 s of virtual time (time the page's timers see; it
    stops while requests are in flight), so the page polls /status.json several times."""
    args = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--virtual-time-budget=5000",
        *extra,
        url,
    ]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=True)


class Cells(HTMLParser):
    """The rendered tables: {row id: {data-k: text}} for rows with data-informer / data-queue,
    plus attributes of cells (``title``) and of <body>."""

    def __init__(self) -> None:
        super().__init__()
        self.informers: dict[str, dict[str, str]] = {}
        self.queues: dict[str, dict[str, str]] = {}
        self.titles: dict[tuple[str, str], str] = {}
        self.body: dict[str, str] = {}
        self._row: dict[str, str] | None = None
        self._row_id = ""
        self._cell: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "body":
            self.body = a
        if tag == "tr" and "data-informer" in a:
            self._row_id = a["data-informer"]
            self._row = self.informers.setdefault(self._row_id, {})
        elif tag == "tr" and "data-queue" in a:
            self._row_id = a["data-queue"]
            self._row = self.queues.setdefault(self._row_id, {})
        if self._row is not None and "data-k" in a:
            self._cell, self._text = a["data-k"], []
            if "title" in a:
                self.titles[(self._row_id, a["data-k"])] = a["title"]

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if self._cell is not None and tag in ("td", "span") and self._row is not None:
            self._row[self._cell] = "".join(self._text).strip()
            self._cell = None
        if tag == "tr":
            self._row = None


def fetch(url: str) -> tuple[str, str]:
    """(Content-Type, body) of a GET."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.headers["Content-Type"], resp.read().decode()


def artifacts() -> Path:
    root = os.environ.get("INFORMERD_TEST_ARTIFACTS")
    path = Path(root) if root else (repo_root() or Path.cwd()) / "out" / "test-artifacts"
    path.mkdir(parents=True, exist_ok=True)
    return path


async def test_the_page_renders_admins_numbers_in_headless_chromium(
    informerd_daemon: Daemon, informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.create_namespace("page")
    for i in range(3):
        fake_apiserver.put_configmap("page", f"cm-{i}", {"i": str(i) * 100})
    informer = await informerd_client.informers.ensure("v1", "ConfigMap", namespace="page")
    await informer.wait_for_sync(timeout_s=30)
    await informerd_client.queues.create(queue_spec("page-q"))
    await informerd_client.queues.add("page-q", ["page/a", "page/b", "page/c", "page/d"])
    await informerd_client.queues.add_after("page-q", ["page/later"], 3600)

    async with WorkStream(
        informerd_client, "page-q", max_in_flight=1, worker_name="page-worker"
    ) as stream:
        assert await stream.receive()  # holds one key while the page is read

        url = informerd_daemon.metrics_url + "/"
        content_type, page = await asyncio.to_thread(fetch, url)
        assert content_type.startswith("text/html")
        # Self-contained: a script of its own, nothing fetched from elsewhere (the only URL is
        # SVG's namespace name).
        assert "<script" in page
        assert "http://" not in page.replace("http://www.w3.org", "")
        status = json.loads((await asyncio.to_thread(fetch, url + "status.json"))[1])
        assert {"nowUnixMs", "clusters", "informers", "queues", "latency"} <= set(status)

        dom = (await asyncio.to_thread(browse, url, "--dump-dom")).stdout
        cells = Cells()
        cells.feed(dom)
        assert int(cells.body.get("data-samples", "0")) >= 2, dom[:2000]

        infos = {i.id: i for i in await informerd_client.admin.informers()}
        queues = {d.queue.spec.name: d for d in await informerd_client.admin.queues()}
        assert set(cells.informers) == set(infos)
        row, info = cells.informers[informer.id], infos[informer.id]
        assert row["objects"] == str(info.state.objects) == "3"
        assert row["synced"] == "yes"
        assert row["namespace"] == "page"
        assert row["reflector"] == "Watching"
        assert row["subscribers"] == str(info.state.subscribers)
        assert cells.titles[(informer.id, "bytes")] == f"{info.state.bytes} bytes"
        assert float(row["events-per-second"]) >= 0

        assert set(cells.queues) == set(queues)
        q, d = cells.queues["page-q"], queues["page-q"]
        assert q["depth"] == str(d.queue.state.depth) == "3"
        assert q["in-flight"] == str(d.queue.state.in_flight) == "1"
        assert q["delayed"] == str(d.queue.state.delayed) == "1"
        assert q["workers"] == str(d.queue.state.workers) == "1"
        # One key waited in the queue before its Get: the page shows its latency percentiles.
        assert q["queue-duration"] != "\u2013 / \u2013"  # en dashes: no percentile

        shot = artifacts() / "status-page.png"
        shot.unlink(missing_ok=True)
        await asyncio.to_thread(browse, url, f"--screenshot={shot}", "--window-size=1400,700")
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert shot.stat().st_size > 10_000


def test_the_page_says_when_the_daemon_is_gone(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    # The page is loaded, then the daemon stops: the next polls fail and the page says so.
    daemon = Daemon.start(fake_apiserver.kubeconfig, tmp_path)
    html = fetch(daemon.metrics_url + "/")[1].encode()
    daemon.close()
    # Served from a file this time (same page, status.json unreachable next to it).
    (tmp_path / "index.html").write_bytes(html)
    dom = browse((tmp_path / "index.html").as_uri(), "--dump-dom").stdout
    assert "cannot reach the daemon" in dom
