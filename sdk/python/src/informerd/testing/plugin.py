"""pytest fixtures (registered through the package's ``pytest11`` entry point).

- ``fake_apiserver`` (session): the fake API server;
- ``kube_apiserver`` (session): the real kube-apiserver from testing/kube;
- ``informerd_daemon``: informerd against the fake API server, stopped after the test;
- ``informerd_client``: an asyncio :class:`informerd.Client` connected to that daemon.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from informerd.client import Client
from informerd.testing.processes import Daemon, FakeApiServer, KubeApiServer


@pytest.fixture(scope="session")
def fake_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeApiServer]:
    api = FakeApiServer.start(tmp_path_factory.mktemp("fake"))
    try:
        yield api
    finally:
        api.close()


@pytest.fixture(scope="session")
def kube_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApiServer]:
    api = KubeApiServer.start(tmp_path_factory.mktemp("kube"))
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def informerd_daemon(fake_apiserver: FakeApiServer, tmp_path: Path) -> Iterator[Daemon]:
    daemon = Daemon.start(fake_apiserver.kubeconfig, tmp_path)
    try:
        yield daemon
    finally:
        daemon.close()


@pytest.fixture
async def informerd_client(informerd_daemon: Daemon) -> AsyncIterator[Client]:
    client = Client.connect(informerd_daemon.target, timeout_s=20)
    try:
        yield client
    finally:
        await client.close()
