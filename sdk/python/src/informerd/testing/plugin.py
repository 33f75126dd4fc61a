"""pytest fixtures (registered through the package's ``pytest11`` entry point).

- ``fake_apiserver`` (session): the fake API server;
- ``kube_apiserver`` (session): the real kube-apiserver from testing/kube;
- ``informerd_daemon``: informerd against the fake API server, stopped after the test;
- ``informerd_client``: an asyncio :class:`informerd.Client` connected to that daemon.

For controllers that write (finalizers, status, server-side apply), test against the real
kube-apiserver: the fake serves no OpenAPI, so kubectl-style validation and anything that needs
schemas (CRDs with structural schemas, server-side apply of built-in kinds' merge keys) behaves
only approximately there. These need the ``kubernetes`` extra (``kubernetes_asyncio``):

- ``informerd_kube_daemon``: informerd against ``kube_apiserver``, stopped after the test;
- ``informerd_kube_client``: an asyncio :class:`informerd.Client` connected to that daemon;
- ``kube_api``: a ``kubernetes_asyncio`` ``ApiClient`` with the admin credentials of
  ``kube_apiserver``, for the writes of :mod:`informerd.kube` (and the official client's APIs);
- ``kube_namespace``: a fresh namespace on ``kube_apiserver`` for the test (deleted after it);
- ``apply_manifest``: ``await apply_manifest(path_or_yaml)`` applies YAML (a file, text, or
  manifests) server-side, as ``kubectl apply --server-side`` would, with namespaced objects
  defaulting to ``kube_namespace``; CRDs in it are waited for until Established.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

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


@pytest.fixture
def informerd_kube_daemon(kube_apiserver: KubeApiServer, tmp_path: Path) -> Iterator[Daemon]:
    """informerd against the real kube-apiserver, stopped after the test."""
    with Daemon.start(kube_apiserver.kubeconfig, tmp_path) as daemon:
        yield daemon


@pytest.fixture
async def informerd_kube_client(informerd_kube_daemon: Daemon) -> AsyncIterator[Client]:
    """A :class:`informerd.Client` connected to ``informerd_kube_daemon``."""
    async with Client.connect(informerd_kube_daemon.target, timeout_s=20) as client:
        yield client


@pytest.fixture
async def kube_api(kube_apiserver: KubeApiServer) -> AsyncIterator[Any]:
    """A ``kubernetes_asyncio.client.ApiClient`` for ``kube_apiserver`` (admin)."""
    try:
        from kubernetes_asyncio import config
    except ImportError as e:  # pragma: no cover - depends on the installed extras
        raise RuntimeError(
            "kube_api needs kubernetes_asyncio: pip install 'informerd[kubernetes]'"
        ) from e
    api = await config.new_client_from_config(config_file=str(kube_apiserver.kubeconfig))
    try:
        yield api
    finally:
        await api.close()


@pytest.fixture
async def kube_namespace(kube_api: Any, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A new namespace named after the test (``t-<test>-<random>``), deleted after it."""
    from informerd import kube

    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{stem}-{secrets.token_hex(3)}"
    namespaces = kube.Resource("v1", "Namespace", "namespaces", namespaced=False)
    await kube.apply(
        kube_api,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        field_manager="informerd-test",
        resource=namespaces,
    )
    try:
        yield name
    finally:
        # kube-apiserver alone runs no namespace controller: the namespace stays Terminating
        # with its objects, harmless to other tests (each has its own namespace).
        await kube.delete(kube_api, namespaces, name)


class ApplyManifest(Protocol):
    """The ``apply_manifest`` fixture's callable."""

    def __call__(
        self,
        source: str | Path | Mapping[str, Any] | Iterable[Mapping[str, Any]],
        *,
        namespace: str | None = None,
        field_manager: str = "informerd-test",
        timeout_s: float = 60.0,
    ) -> Awaitable[list[dict[str, Any]]]: ...


@pytest.fixture
def apply_manifest(kube_api: Any, kube_namespace: str) -> ApplyManifest:
    """Server-side apply of YAML to ``kube_apiserver`` (see :func:`informerd.kube.apply_manifest`);
    namespaced objects without a namespace go to ``kube_namespace``."""
    from informerd import kube

    def apply(
        source: str | Path | Mapping[str, Any] | Iterable[Mapping[str, Any]],
        *,
        namespace: str | None = None,
        field_manager: str = "informerd-test",
        timeout_s: float = 60.0,
    ) -> Awaitable[list[dict[str, Any]]]:
        return kube.apply_manifest(
            kube_api,
            source,
            namespace=kube_namespace if namespace is None else namespace,
            field_manager=field_manager,
            timeout_s=timeout_s,
        )

    return apply
